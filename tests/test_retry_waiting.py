"""An agent waiting in place (``run_main(wait_for_person=...)``) after its retry policy
ran out goes on by itself once a person runs ``oncelog retry`` or ``oncelog redrive``, as
typed, in another process: same key, one send counted at the provider (a file outside
the ledger), the run completed, and nothing restarted. A person's pause of an effect's
retries (``oncelog retry --pause``) stops it at its next attempt, and ``--resume`` lets
the waiting agent go on with the same key. Both stores."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import Popen

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
    assert ended.returncode == oncelog.EXIT_HALTED, ended.stderr  # after its wait: EffectRefused
    assert "waiting up to 0.5 s for a person's decision" in ended.stderr
    assert "no decision on run 'p-1' in 0.5 s" in ended.stderr
    assert not count.exists()


def _until(condition: Callable[[oncelog.Ledger], bool], url: str, agent: Popen[str]) -> None:
    deadline = time.monotonic() + 30
    with oncelog.open(url) as ledger:
        while True:
            try:
                if condition(ledger):
                    return
            except oncelog.UnknownRun:
                pass
            assert agent.poll() is None, agent.communicate()
            assert time.monotonic() < deadline, "never reached"
            time.sleep(0.05)


def _backing_off(ledger: oncelog.Ledger) -> bool:
    steps = ledger.steps(RUN)
    return bool(steps) and steps[0].attempts == 1 and steps[0].retry_at is not None


def _paused(ledger: oncelog.Ledger) -> bool:
    run = ledger.get_run(RUN)
    return run.stopped_by == "RetriesPaused" and ledger.waiting_in_place(RUN) is not None


def test_paused_retries_stop_at_the_next_attempt_and_resume_with_the_same_key(
    store_url: str, tmp_path: Path
) -> None:
    count, down = tmp_path / "sent", tmp_path / "down"
    down.touch()
    agent = subprocess.Popen(
        python(AGENT, store_url, RUN, count, down, "60", "3"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    why = ("--why", "the mail service is being fixed")
    try:
        _until(_backing_off, store_url, agent)  # its first attempt failed; it waits 3 s
        paused = run_python("-m", "oncelog", "retry", RUN, "send", "--pause", "--by", "ops",
                            *why, "--db", store_url)  # fmt: skip
        assert paused.returncode == 0, paused.stdout + paused.stderr
        assert "retries paused at its next attempt" in paused.stdout
        _until(_paused, store_url, agent)  # the next attempt halted the run: it waits
        shown = run_python("-m", "oncelog", "show", RUN, "--db", store_url)
        assert "oncelog retry p-1 send --resume --by NAME --why WHY" in shown.stdout, shown.stdout
        down.unlink()
        resumed = run_python("-m", "oncelog", "retry", RUN, "send", "--resume", "--by", "ops",
                             "--why", "fixed", "--db", store_url)  # fmt: skip
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "goes on by itself" in resumed.stdout, resumed.stdout
        _, stderr = finish_within(agent, 30, "the waiting agent did not go on")
        assert agent.returncode == 0, stderr
        assert "RetriesPaused" in stderr
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    with oncelog.open(store_url) as ledger:
        step = ledger.steps(RUN)[0]
        assert ledger.get_run(RUN).status is oncelog.RunStatus.COMPLETED
        assert ledger.verify().ok
        said = [(e.event, e.data["by"]) for e in ledger.journal(RUN) if "retries_" in e.event]
    assert said == [("retries_paused", "ops"), ("retries_resumed", "ops")]
    assert step.attempts == 2  # the failed one, and the one after the resume; none between
    assert count.read_text().splitlines() == [f"{RUN} {step.key}"]


def test_a_pause_is_refused_where_no_retry_is_left(ledger: oncelog.Ledger) -> None:
    send = ledger.tool(kind="create", name="send")(lambda x, *, idempotency_key: x)
    with ledger.run("d-1") as run:
        run.effect("s", send, 1)
    with pytest.raises(oncelog.NotRetryable, match="only an effect that did not happen"):
        ledger.pause_retries("d-1", "s", by="ops", why="look")
    with pytest.raises(oncelog.NotRetryable, match="not paused"):
        ledger.pause_retries("d-1", "s", by="ops", why="look", resume=True)
    with pytest.raises(oncelog.UnknownRun):
        ledger.pause_retries("d-2", "s", by="ops", why="look")
    assert not [e for e in ledger.journal("d-1") if "retries_" in e.event]
