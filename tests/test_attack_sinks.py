"""Attacks on the journal shipper's HTTP sink (a follow-up of issue 29, item 7), against
a real shipping process (``tests/sink_agents/shipping.py``, or ``oncelog ship``) and real
HTTP servers that keep what they received.

A sink that trickles its answer, answers 300 MB or redirects elsewhere must not hold the
shipper, fill its memory or reach another address: the batch is kept and sent again
later. A token in the sink's URL must not reach the shipper's log, its messages or its
errors.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import oncelog

from .support.launch import environment, finish_within, python
from .support.operator_commands import oncelog_cli
from .support.receiver import HUGE, HostileReceiver, receiving, serving

AGENT = Path(__file__).parent / "sink_agents" / "shipping.py"
HELD = 30.0  # seconds: a shipper not out by then is held by its sink
TOKEN = "tok-5ecret-91"


def journal(db_path: str) -> list[dict[str, object]]:
    """A ledger with one run, and what the shipper owes the sink: its export."""
    with oncelog.open(db_path) as ledger:

        @ledger.tool(kind="create", name="note")
        def note(n: int, *, idempotency_key: str) -> int:
            return n

        with ledger.run("r1") as run:
            run.effect("one", note, 1)
    return [json.loads(line) for line in oncelog_cli(db_path, "export").splitlines()]


def shipping(
    db_path: str, sink: str, tmp_path: Path, *, timeout: float, tries: int
) -> tuple[dict[str, int], str]:
    """Run the shipping process until the sink took everything or failed ``tries`` times:
    its counters and its stderr."""
    process = subprocess.Popen(
        python(AGENT, db_path, sink, tmp_path / "ship.state", str(timeout), str(tries)),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stdout, stderr = finish_within(process, HELD, "the shipper was still held by its sink")
    assert process.returncode == 0, stderr
    return json.loads(stdout), stderr


def test_a_trickling_sink_does_not_hold_the_shipper(db_path: str, tmp_path: Path) -> None:
    lines = journal(db_path)
    # A byte every 0.5 s: each read waits far less than the sink's 2 s timeout.
    with serving(HostileReceiver("trickle", trickle_every=0.5)) as sink:
        counters, stderr = shipping(
            db_path, f"http://{sink.address}/ingest", tmp_path, timeout=2.0, tries=2
        )
    assert counters == {"shipped": 0, "failures": 2}  # given up on, twice: kept, tried again
    assert "timed out" in stderr, stderr
    assert sink.bodies == lines * 2


def test_a_huge_answer_from_a_sink_is_not_read(db_path: str, tmp_path: Path) -> None:
    lines = journal(db_path)
    with serving(HostileReceiver("huge")) as sink:
        counters, stderr = shipping(
            db_path, f"http://{sink.address}/ingest", tmp_path, timeout=10.0, tries=1
        )
        assert sink.answered.wait(HELD)
    assert counters == {"shipped": len(lines), "failures": 0}, stderr  # a 200 took them
    assert sink.bodies == lines
    assert sink.body_sent < HUGE // 10, sink.body_sent  # the shipper hung up, unread


def test_a_sink_s_redirect_is_a_failure(db_path: str, tmp_path: Path) -> None:
    lines = journal(db_path)
    with receiving() as elsewhere, serving(HostileReceiver("redirect", elsewhere.url)) as sink:
        counters, stderr = shipping(
            db_path, f"http://{sink.address}/ingest", tmp_path, timeout=10.0, tries=1
        )
    assert counters == {"shipped": 0, "failures": 1}
    assert "302" in stderr, stderr
    assert sink.bodies == lines
    assert elsewhere.requests == [], "the shipper followed the redirect"


@pytest.mark.parametrize("where", ["userinfo", "path", "query"])
def test_a_token_in_the_sink_s_url_is_not_shown(db_path: str, tmp_path: Path, where: str) -> None:
    lines = journal(db_path)
    with serving(HostileReceiver("fail")) as sink:
        url = {
            "userinfo": f"http://ingest:{TOKEN}@{sink.address}/ingest",
            "path": f"http://{sink.address}/ingest/{TOKEN}",
            "query": f"http://{sink.address}/ingest?token={TOKEN}",
        }[where]
        once = subprocess.run(
            python("-m", "oncelog", "ship", "--db", db_path, "--to", url, "--state",
                   tmp_path / "once.state", "--once"),
            env=environment(), capture_output=True, text=True, timeout=HELD,
        )  # fmt: skip
        _, logged = shipping(db_path, url, tmp_path, timeout=10.0, tries=1)
    assert once.returncode == 75, once.stderr  # the sink is down: try again later
    for shown in (once.stdout + once.stderr, logged):
        assert "500" in shown, shown  # the failure is shown...
        assert TOKEN not in shown, shown  # ...without the token
        assert f"http://{sink.address}/" in shown, shown  # but with where it went
    assert sink.bodies == lines * 2
    path, authorization = sink.requests[0]
    assert path == urlsplit(url)._replace(scheme="", netloc="").geturl()
    if where == "userinfo":  # the userinfo is the request's basic credentials
        assert str(authorization).startswith("Basic ")


@pytest.mark.parametrize("url", [f"http://ingest:{TOKEN}@/in", f"https://siem.internal:{TOKEN}/in"])
def test_a_sink_url_refused_is_not_repeated(db_path: str, tmp_path: Path, url: str) -> None:
    journal(db_path)
    refused = subprocess.run(
        python("-m", "oncelog", "ship", "--db", db_path, "--to", url, "--state",
               tmp_path / "ship.state", "--once"),
        env=environment(), capture_output=True, text=True, timeout=HELD,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr  # a usage error, not "try again later"
    assert "must be an http(s) URL with a host" in refused.stderr, refused.stderr
    assert TOKEN not in refused.stdout + refused.stderr, refused.stderr
