"""From a notice to a decided, running-again run, with real processes (issue 33, item 1):
an agent is SIGKILLed by the provider right after it sent an email; started again, it
halts on the email in doubt and waits in place; the notice is posted (plain, Slack blocks,
Telegram inline keyboard) to a local receiver; the person follows the link the notice
carries to a real ``oncelog console`` process, looks the key up at the evidence URL,
confirms once, and the waiting agent completes. The email is counted at the provider.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

import oncelog

from .support.launch import environment, python
from .support.provider_process import Provider
from .support.receiver import Receiver, receiving

AGENT = Path(__file__).parent / "notice_agents" / "linked.py"
TIMEOUT = 60.0
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
SERVING = re.compile(r"oncelog console on (http://[^/\s]+)/")


@pytest.fixture
def console(db_path: str, tmp_path: Path) -> Iterator[str]:
    """``oncelog console`` as a process of its own, on a free port: its base URL."""
    with oncelog.open(db_path):
        pass  # the console opens an existing ledger only
    process = subprocess.Popen(
        python("-m", "oncelog", "console", "--port", "0", "--db", db_path,
               "--token-file", str(tmp_path / "console-token")),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        found = SERVING.search(process.stdout.readline())
        assert found is not None, process.stderr.read() if process.stderr else ""
        yield found.group(1)
    finally:
        process.terminate()
        process.communicate(timeout=TIMEOUT)


def agent(
    db_path: str, provider: Provider, hook: str, shape: str, *options: str, console: str = ""
) -> subprocess.Popen[str]:
    extra = {"ONCELOG_CONSOLE_URL": console} if console else {}
    return subprocess.Popen(
        python(AGENT, db_path, "r1", provider.url, hook, shape, *options),
        env=environment(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def links_in(body: dict[str, Any], shape: str) -> dict[str, str]:
    """The decision links as the person sees them: the notice's, or its buttons' URLs."""
    if shape == "plain":
        links: dict[str, str] = body["links"]
        return links
    if shape == "slack":
        actions = [b for b in body["blocks"] if b["type"] == "actions"]
        buttons = actions[0]["elements"]
        assert all(b["type"] == "button" for b in buttons)
        labels = {"Done (it happened)": "done", "Not done (send again)": "not_done",
                  "Abandon": "abandon"}  # fmt: skip
        return {labels[b["text"]["text"]]: b["url"] for b in buttons}
    rows = body["reply_markup"]["inline_keyboard"]
    names = {
        "Done (it happened)": "done",
        "Not done (send again)": "not_done",
        "Abandon": "abandon",
    }
    return {names[row[0]["text"]]: row[0]["url"] for row in rows}


def evidence_in(body: dict[str, Any], shape: str) -> str:
    if shape == "plain":
        url: str = body["evidence_url"]
        return url
    text = body["blocks"][0]["text"]["text"] if shape == "slack" else body["text"]
    found = re.search(r"look it up: (\S+)", text)
    assert found is not None, text
    return found.group(1)


@pytest.mark.parametrize("shape", ["plain", "slack", "telegram"])
def test_from_the_notice_to_the_completed_run_in_one_confirming_click(
    db_path: str, provider: Provider, console: str, shape: str, request: pytest.FixtureRequest
) -> None:
    with receiving() as hook:
        first = agent(db_path, provider, hook.url, shape, "--kill")
        first.communicate(timeout=TIMEOUT)
        assert first.returncode == -9, "the provider kills the agent before it answers"
        assert provider.total("r1") == 1  # the email went out

        waiting = agent(db_path, provider, hook.url, shape, "--wait", "120", console=console)
        request.addfinalizer(lambda: reap(waiting))
        body = next_body(hook, waiting)
        links = links_in(body, shape)
        assert all(url.startswith(console + "/link/") for url in links.values())

        actions = 0
        with httpx.Client(timeout=TIMEOUT) as person:
            # Looking the key up where the notice says (reading, not deciding).
            [found] = person.get(evidence_in(body, shape)).json()["found"]
            page = person.get(links["done"])  # 1: the button in the message
            actions += 1
            assert page.status_code == 200, page.text
            assert 'value="done" checked' in page.text
            csrf = CSRF.search(page.text)
            assert csrf is not None
            confirmed = person.post(  # 2: "Confirm", as the page's form sends it
                links["done"], headers={"Origin": console},
                data={"csrf": csrf.group(1), "resolution": "done", "by": "dana",
                      "result": json.dumps(found)},
            )  # fmt: skip
            actions += 1
            assert confirmed.status_code == 200, confirmed.text
            assert "Your decision is recorded" in confirmed.text
        stdout, stderr = waiting.communicate(timeout=TIMEOUT)
    assert waiting.returncode == 0, stderr
    assert "completed" in stdout
    assert actions == 2  # open the link, confirm: no login, no CLI, no restart typed
    assert provider.total("r1") == 1  # the email was not sent again
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run("r1").status is oncelog.RunStatus.COMPLETED
        [resolved] = [e for e in ledger.journal("r1") if e.event == "resolved"]
        assert resolved.data["by"] == "dana"


def reap(process: subprocess.Popen[str]) -> None:
    """Kill an agent a failed test left waiting (a passed one has exited already)."""
    if process.poll() is None:
        process.kill()
    process.communicate()


def next_body(hook: Receiver, waiting: subprocess.Popen[str]) -> dict[str, Any]:
    """The first notice the receiver got, once the agent halted and posted it."""
    import time

    deadline = time.monotonic() + TIMEOUT
    while not hook.bodies:
        if waiting.poll() is not None:
            pytest.fail(f"the agent exited {waiting.returncode}: {waiting.communicate()[1]}")
        assert time.monotonic() < deadline, "no notice reached the receiver"
        time.sleep(0.05)
    return hook.bodies[0]


CLERK = Path(__file__).parent / "wait_agents" / "clerk.py"


def test_an_approval_from_the_notice_lets_the_waiting_agent_go_on(
    db_path: str, console: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    markers = tmp_path / "performed"
    with receiving() as hook:
        waiting = subprocess.Popen(
            python(CLERK, db_path, "r1", markers, "1", "--approval", "--wait", "120",
                   "--poll", "0.2", "--webhook", hook.url),
            env=environment(ONCELOG_CONSOLE_URL=console),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        request.addfinalizer(lambda: reap(waiting))
        body = next_body(hook, waiting)
        assert body["error"] == "ApprovalRequired"
        assert body["tool"] == "wipe"
        assert set(body["links"]) == {"approve", "deny"}
        with httpx.Client(timeout=TIMEOUT) as person:
            page = person.get(body["links"]["approve"])  # 1: the button
            assert 'value="approve" checked' in page.text
            csrf = CSRF.search(page.text)
            assert csrf is not None
            confirmed = person.post(  # 2: "Confirm"
                body["links"]["approve"], headers={"Origin": console},
                data={"csrf": csrf.group(1), "decision": "approve", "by": "dana"},
            )  # fmt: skip
            assert confirmed.status_code == 200, confirmed.text
        stdout, stderr = waiting.communicate(timeout=TIMEOUT)
    assert waiting.returncode == 0, stderr
    assert "completed" in stdout
    assert len(markers.read_text().splitlines()) == 2  # the wipe, once, and the email
    with oncelog.open(db_path) as ledger:
        [approval] = ledger.approvals(None)
    assert (approval.status, approval.decided_by) == (oncelog.ApprovalStatus.USED, "dana")
