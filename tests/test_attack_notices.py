"""Attacks on telling a person (issue 29, item 7), against real agent processes
(``tests/notice_agents/paged.py``) and real HTTP servers that keep what they received.

A webhook that trickles its answer, answers 300 MB or redirects elsewhere must not hold
the agent, fill its memory or reach another address; a token in the webhook's URL must
not reach the log; and a preflight conflict that comes back after a person's ``not_done``
is a new occurrence that pages again.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import oncelog

from .support.launch import environment, finish_within, python
from .support.operator_commands import oncelog_cli
from .support.receiver import HUGE, HostileReceiver, Receiver, receiving, serving

AGENT = Path(__file__).parent / "notice_agents" / "paged.py"
HELD = 60.0  # seconds: an agent not out by then is held by its webhook


def halted_agent(db_path: str, webhook: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the agent to its end after a kill switch: it halts and sends one notice."""
    with oncelog.open(db_path):
        pass  # a kill switch is set on a ledger that exists
    oncelog_cli(db_path, "halt", "--run", "r1", "--ahead", "--reason", "audit", "--by", "bob")
    return agent(db_path, webhook, tmp_path)


def agent(db_path: str, webhook: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        python(AGENT, db_path, "r1", webhook, tmp_path / "performed"),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stdout, stderr = finish_within(process, HELD, "the agent was still held by its webhook")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def undelivered(db_path: str) -> list[str]:
    """The ids of the notices journalled and never confirmed delivered."""
    with oncelog.open(db_path) as ledger:
        journal = list(ledger.journal("r1"))
    notified = {e.data["id"] for e in journal if e.event == "person_notified"}
    return [str(e.data["id"]) for e in journal if e.event == "person_needed"
            and e.data["id"] not in notified]  # fmt: skip


def test_a_trickling_webhook_does_not_hold_the_agent(db_path: str, tmp_path: Path) -> None:
    with serving(HostileReceiver("trickle")) as hook:
        ended = halted_agent(db_path, f"http://{hook.address}/hook", tmp_path)
    assert ended.returncode == oncelog.EXIT_HALTED, ended.stderr
    assert [b["error"] for b in hook.bodies] == ["RunHalted"]
    assert "timed out" in ended.stderr, ended.stderr
    assert len(undelivered(db_path)) == 1  # kept: the next stop delivers it again


def test_a_huge_answer_is_not_read(db_path: str, tmp_path: Path) -> None:
    with serving(HostileReceiver("huge")) as hook:
        ended = halted_agent(db_path, f"http://{hook.address}/hook", tmp_path)
        assert hook.answered.wait(HELD)
    assert ended.returncode == oncelog.EXIT_HALTED, ended.stderr
    assert len(hook.bodies) == 1
    assert hook.body_sent < HUGE // 10, hook.body_sent  # the agent hung up, unread
    assert undelivered(db_path) == []  # a 200 delivered it, whatever came after


def test_a_redirect_is_a_failed_delivery(db_path: str, tmp_path: Path) -> None:
    with receiving() as elsewhere, serving(HostileReceiver("redirect", elsewhere.url)) as hook:
        ended = halted_agent(db_path, f"http://{hook.address}/hook", tmp_path)
    assert ended.returncode == oncelog.EXIT_HALTED, ended.stderr
    assert len(hook.bodies) == 1
    assert elsewhere.requests == [], "the agent followed the redirect"
    assert "302" in ended.stderr, ended.stderr
    assert len(undelivered(db_path)) == 1


@pytest.mark.parametrize("where", ["userinfo", "path", "query"])
def test_a_token_in_the_webhook_url_is_not_logged(db_path: str, tmp_path: Path, where: str) -> None:
    token = "tok-5ecret-91"
    with serving(HostileReceiver("fail")) as hook:
        webhook = {
            "userinfo": f"http://hooks:{token}@{hook.address}/hook",
            "path": f"http://{hook.address}/services/T0/{token}",
            "query": f"http://{hook.address}/hook?token={token}",
        }[where]
        ended = halted_agent(db_path, webhook, tmp_path)
    assert ended.returncode == oncelog.EXIT_HALTED, ended.stderr
    assert "500" in ended.stderr, ended.stderr  # the failure is logged...
    assert token not in ended.stderr, ended.stderr  # ...without the token
    assert f"http://{hook.address}/" in ended.stderr  # but with where it went
    path, authorization = hook.requests[0]
    assert path == urlsplit(webhook)._replace(scheme="", netloc="").geturl()
    if where == "userinfo":  # the userinfo is the request's basic credentials
        assert str(authorization).startswith("Basic ")


def test_a_preflight_conflict_after_not_done_pages_again(
    db_path: str, tmp_path: Path, receiver: Receiver
) -> None:
    first = agent(db_path, receiver.url, tmp_path)
    assert first.returncode == oncelog.EXIT_HALTED, first.stderr
    again = agent(db_path, receiver.url, tmp_path)  # a restart before anyone decided
    assert again.returncode == oncelog.EXIT_HALTED, again.stderr
    assert [b["error"] for b in receiver.bodies] == ["PreflightConflict"]

    oncelog_cli(db_path, "resolve", "r1", "refund", "not_done", "--by", "alice")
    second = agent(db_path, receiver.url, tmp_path)  # the provider still says conflict
    assert second.returncode == oncelog.EXIT_HALTED, second.stderr
    assert [b["error"] for b in receiver.bodies] == ["PreflightConflict"] * 2
    assert len({b["id"] for b in receiver.bodies}) == 2
    assert not (tmp_path / "performed").exists()  # the refund itself never ran


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


TOKEN = "tok-5ecret-91"


@pytest.mark.parametrize(
    "webhook",
    [
        f"ftp://hooks:{TOKEN}@hooks.example.com/in",  # not http(s)
        f"hooks.example.com/services/{TOKEN}",  # no scheme
        f"https:///services/{TOKEN}",  # no host
        f"http://hooks.example.com:{TOKEN}/in",  # a port that is not a number
    ],
)
def test_a_webhook_setting_that_is_no_http_url_is_refused_unrepeated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, webhook: str
) -> None:
    ledger_file = tmp_path / "ledger.db"
    with pytest.raises(oncelog.ConfigurationError) as given:
        oncelog.open(str(ledger_file), alert_webhook=webhook)
    monkeypatch.setenv("ONCELOG_ALERT_WEBHOOK", webhook)
    with pytest.raises(oncelog.ConfigurationError) as from_env:
        oncelog.open(str(ledger_file))
    with pytest.raises(oncelog.ConfigurationError) as budget:
        oncelog.Budget(steps=3, webhook=webhook)
    for refused, setting in (
        (given, "alert_webhook"), (from_env, "$ONCELOG_ALERT_WEBHOOK"), (budget, "webhook")
    ):  # fmt: skip
        assert str(refused.value).startswith(f"{setting} must be an http(s) URL"), refused.value
        assert TOKEN not in str(refused.value)
    assert not ledger_file.exists()  # refused before any ledger was made
