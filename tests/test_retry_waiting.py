"""An agent waiting in place (``run_main(wait_for_person=...)``) after its retry policy
ran out goes on by itself once a person runs ``oncelog retry`` or ``oncelog redrive``, as
typed, in another process: same key, one send counted at the provider (a file outside
the ledger), the run completed, and nothing restarted. Both stores."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import oncelog

from .support.launch import finish_within, python, run_python

AGENT = Path(__file__).parent / "retry_agents" / "patient.py"
RUN = "p-1"


def _waiting_in_place(url: str) -> bool:
    with oncelog.open(url) as ledger:
        try:
            failed = ledger.get_run(RUN).status is oncelog.RunStatus.FAILED
        except oncelog.UnknownRun:
            return False
        return failed and ledger.waiting_in_place(RUN) is not None


@pytest.mark.parametrize(
    "command",
    [("retry", RUN, "send"), ("redrive", RUN)],
    ids=["retry", "redrive"],
)
def test_a_waiting_agent_goes_on_after_a_retry(
    store_url: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    count, down = tmp_path / "sent", tmp_path / "down"
    down.touch()  # the mail service refuses connections
    agent = subprocess.Popen(
        python(AGENT, store_url, RUN, count, down),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not _waiting_in_place(store_url):
            assert agent.poll() is None, agent.communicate()
            assert time.monotonic() < deadline, "the agent never waited in place"
            time.sleep(0.05)
        shown = run_python("-m", "oncelog", "show", RUN, "--db", store_url)
        assert "oncelog retry p-1 send --by NAME --why WHY" in shown.stdout, shown.stdout
        assert "waiting in place" in shown.stdout, shown.stdout
        down.unlink()  # the service is back
        done = run_python(
            "-m", "oncelog", *command, "--by", "ops", "--why", "the mail service is back",
            "--db", store_url,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "goes on by itself" in done.stdout, done.stdout
        _, stderr = finish_within(agent, 30, "the waiting agent did not go on")
        assert agent.returncode == 0, stderr
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    sent = count.read_text().splitlines()
    with oncelog.open(store_url) as ledger:
        assert ledger.get_run(RUN).status is oncelog.RunStatus.COMPLETED
        step = ledger.steps(RUN)[0]
        assert ledger.verify().ok
        retried = [e for e in ledger.journal(RUN) if e.event == "retried"]
    assert sent == [f"{RUN} {step.key}"]  # one send, with the step's one key
    assert [(e.data["by"], e.data["why"]) for e in retried] == [("ops", "the mail service is back")]


def test_no_retry_in_time_exits_as_without_waiting(db_path: str, tmp_path: Path) -> None:
    count, down = tmp_path / "sent", tmp_path / "down"
    down.touch()
    ended = run_python(AGENT, db_path, RUN, count, down, "0.5")
    assert ended.returncode == 1, ended.stderr  # after its wait: EffectRefused, exit 1
    assert "waiting up to 0.5 s for a person's decision" in ended.stderr
    assert "no decision on run 'p-1' in 0.5 s" in ended.stderr
    assert not count.exists()
