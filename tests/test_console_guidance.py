"""The console leads a person on: a refused decision comes back as it was typed, a refusal
names the page's box rather than a CLI flag, and a run whose agent waits in place for the
decision says it goes on by itself. Through the console's app, against real ledgers."""

from __future__ import annotations

import html
import subprocess
import sys
import time
from pathlib import Path

import oncelog

from .support.console_client import console_client
from .support.incidents import effect_killed_in_flight
from .support.launch import environment

CLERK = Path(__file__).parent / "wait_agents" / "clerk.py"


def test_a_refused_decision_comes_back_as_it_was_typed(db_path: str, tmp_path: Path) -> None:
    effect_killed_in_flight(db_path, tmp_path)
    typed = {
        "run_id": "r-killed", "step_id": "email-0", "attempt": "1", "resolution": "done",
        "result": '{"id": "msg_7", "note": "<b>"}', "no_result": "yes", "by": "alice",
        "note": "found it by its key",
    }  # fmt: skip
    with oncelog.open(db_path) as ledger, console_client(ledger) as person:
        refused = person.post("/unknown/resolve", typed)
        assert refused.status_code == 400
        page = refused.text
        assert "give a result or tick “no result”, not both" in html.unescape(page)
        assert '{"id": "msg_7", "note": "<b>"}</textarea>' in html.unescape(page)
        assert "<b>" not in page  # as text, never markup
        assert 'value="done" required checked' in page
        assert 'name="no_result" value="yes" checked' in page
        assert 'value="alice"' in page
        assert 'value="found it by its key"' in page
        assert ledger.in_doubt()  # nothing was decided


def test_a_refusal_names_the_box_to_tick_not_a_flag(ledger: oncelog.Ledger) -> None:
    refused: list[str] = []

    @ledger.tool(kind="create", name="send")
    def send(*, idempotency_key: str) -> dict[str, str]:
        # In flight, in this live process: a decision now is refused unless forced.
        form = {"run_id": "r1", "step_id": "mail", "attempt": "1", "resolution": "not_done",
                "by": "alice", "note": "nothing at the provider"}  # fmt: skip
        with console_client(ledger) as person:
            answer = person.post("/unknown/resolve", form)
            assert answer.status_code == 409
            refused.append(html.unescape(answer.text))
        return {"id": "msg_1"}

    with ledger.run("r1") as run:
        run.effect("mail", send)
    [page] = refused
    assert "tick “Decide even if the process holding this run is still alive”" in page
    assert "--force" not in page
    assert 'value="not_done" checked' in page
    assert 'value="nothing at the provider"' in page


def test_the_run_page_says_an_agent_waits_in_place(db_path: str, tmp_path: Path) -> None:
    markers = tmp_path / "keys"
    argv = [sys.executable, str(CLERK), db_path, "r1", str(markers), "2"]
    killed = subprocess.run(argv, env=environment("after_call@send-1"), capture_output=True,
                            timeout=60, check=False)  # fmt: skip
    assert killed.returncode == -9
    agent = subprocess.Popen([*argv, "--wait", "120", "--poll", "0.2"], env=environment(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        with oncelog.open(db_path) as ledger:
            deadline = time.monotonic() + 60
            while ledger.waiting_in_place("r1") is None:
                assert (time.monotonic() < deadline, agent.poll()) == (True, None)
                time.sleep(0.05)
            with console_client(ledger) as person:
                page = html.unescape(person.get("/runs/r1").text)
            assert "An agent waits in place for a decision on this run (pid " in page
            assert "once you decide, it goes on by itself. Nothing needs restarting." in page
    finally:
        agent.kill()
        agent.wait(timeout=60)
    with oncelog.open(db_path) as ledger, console_client(ledger) as person:
        page = html.unescape(person.get("/runs/r1").text)
    assert "waits in place" not in page  # its process is gone
