"""A person's decision moves a run on, and nobody is asked twice.

Real agent processes (``tests/wait_agents/clerk.py``, a plain ``oncelog.run_main``):
SIGTERM at random moments drains them (exit 75, never a halt, never a duplicate); a
process waiting for a person continues within seconds of ``oncelog resolve`` or
``oncelog approve`` run from another process, on SQLite and PostgreSQL; SIGTERM while it
waits ends it at once; and a crash loop pages a person once per halt.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import oncelog

from .support.launch import python
from .support.operator_commands import oncelog_cli
from .support.receiver import Receiver, receiving

CLERK = Path(__file__).parent / "wait_agents" / "clerk.py"
TIMEOUT = 60.0
# Bounds a waiting agent's exit after its decision against a hang only: each such test
# tells how the agent was woken by what it did (its wait outlasts any poll), not by time.
HANG = 300.0
WAIT = "3600"  # the agent's wait for a decision: longer than any test waits on it
STORM_TRIALS = 25


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


def start(
    url: str, run_id: str, markers: Path, count: int, *options: str, crash: str | None = None
) -> subprocess.Popen[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ONCELOG_CRASH_AT"}
    if crash is not None:
        environment["ONCELOG_CRASH_AT"] = crash
    return subprocess.Popen(
        python(str(CLERK), url, run_id, str(markers), str(count), *options),
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def started(agent: subprocess.Popen[str]) -> None:
    """Return once the agent runs its code (its SIGTERM handler is installed)."""
    assert agent.stdout is not None
    line = agent.stdout.readline()
    if line != "started\n":
        _, stderr = agent.communicate(timeout=TIMEOUT)
        pytest.fail(f"the agent never started: {line!r} {stderr}")


def until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def status(url: str, run_id: str) -> tuple[oncelog.RunStatus, str | None]:
    with oncelog.open(url) as ledger:
        record = ledger.get_run(run_id)
    return record.status, record.owner


def stopped_for_a_person(url: str, run_id: str) -> bool:
    try:
        now, owner = status(url, run_id)
    except oncelog.UnknownRun:
        return False
    return now in (oncelog.RunStatus.HALTED, oncelog.RunStatus.WAITING) and owner is None


def think() -> str:
    return "ok"


def keys(markers: Path) -> list[str]:
    return markers.read_text().splitlines() if markers.exists() else []


# -- SIGTERM drains, by default -----------------------------------------------------------


@pytest.mark.slow
def test_sigterm_at_random_moments_drains_and_never_halts(store_url: str, tmp_path: Path) -> None:
    """A plain ``run_main`` agent, SIGTERMed at a random instant of its run, trial after
    trial: exit 75 with the run queued and its lease released (or 0 if it had finished),
    never a halt, never an email twice; the next start completes the run."""
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    # The signals land within one whole run's time, measured here, so that most of them
    # land mid-run whether this machine's fsyncs take microseconds or milliseconds.
    calibration = start(store_url, "storm-calibration", tmp_path / "calibration.keys", 6)
    started(calibration)
    began = time.monotonic()
    calibration.communicate(timeout=TIMEOUT)
    assert calibration.returncode == 0
    whole_run = time.monotonic() - began
    drained = 0
    for trial in range(STORM_TRIALS):
        run_id, markers = f"storm-{trial}", tmp_path / f"storm-{trial}.keys"
        agent = start(store_url, run_id, markers, 6)
        started(agent)
        time.sleep(chance.uniform(0.0, whole_run))
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=TIMEOUT)
        assert agent.returncode in (oncelog.EXIT_TRY_LATER, 0), (seed, trial, stderr)
        if agent.returncode == oncelog.EXIT_TRY_LATER:
            drained += 1
            assert "Draining" in stderr, (seed, trial, stderr)
            assert status(store_url, run_id) == (oncelog.RunStatus.QUEUED, None), (seed, trial)
        again = start(store_url, run_id, markers, 6)
        _, stderr = again.communicate(timeout=TIMEOUT)
        assert again.returncode == 0, (seed, trial, stderr)
        sent = keys(markers)
        assert len(sent) == len(set(sent)) == 6, (seed, trial, sent)
    with oncelog.open(store_url) as ledger:
        for trial in range(STORM_TRIALS):
            events = {e.event for e in ledger.journal(f"storm-{trial}")}
            assert not events & {"unknown", "run_halted"}, (seed, trial, events)
    assert drained >= STORM_TRIALS // 3, (seed, drained)  # most signals landed mid-run


def test_drain_on_sigterm_false_opts_out(db_path: str, tmp_path: Path) -> None:
    script = (
        "import os, signal, oncelog\n"
        "oncelog.run_main(lambda: os.kill(os.getpid(), signal.SIGTERM), drain_on_sigterm=False)"
    )
    done = subprocess.run(python("-c", script), capture_output=True, timeout=TIMEOUT)
    assert done.returncode == -signal.SIGTERM


# -- waiting for a person -----------------------------------------------------------------


def poll_for(store_url: str) -> str:
    """On PostgreSQL the agent looks only once its wait (``WAIT``, past ``HANG``) is over:
    NOTIFY must be what wakes it, or the test fails on the hang."""
    return WAIT if store_url.startswith("postgresql") else "0.2"


def test_a_waiting_process_continues_soon_after_resolve(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "keys"
    first = start(store_url, "r1", markers, 3, crash="after_call@send-1")
    _, stderr = first.communicate(timeout=TIMEOUT)
    assert first.returncode == -signal.SIGKILL, stderr
    agent = start(store_url, "r1", markers, 3, "--wait", WAIT, "--poll", poll_for(store_url))
    until(lambda: stopped_for_a_person(store_url, "r1"), "the run to halt")
    assert agent.poll() is None, "the agent waits instead of exiting 3"
    oncelog_cli(store_url, "resolve", "r1", "send-1", "done", "--by", "alice",
                "--result", '{"sent": 1}')  # fmt: skip
    stdout, stderr = agent.communicate(timeout=HANG)
    assert agent.returncode == 0, stderr  # woken by the decision, before its wait ran out
    assert "completed" in stdout
    assert "AmbiguousOutcome" in stderr
    assert f"waiting up to {WAIT} s" in stderr
    sent = keys(markers)
    assert len(sent) == len(set(sent)) == 3, sent  # send-1 was not sent again
    assert status(store_url, "r1")[0] is oncelog.RunStatus.COMPLETED


def test_a_waiting_process_continues_soon_after_approve(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "keys"
    options = ("--approval", "--wait", WAIT, "--poll", poll_for(store_url))
    agent = start(store_url, "r1", markers, 2, *options)
    until(lambda: stopped_for_a_person(store_url, "r1"), "the run to wait for approval")
    assert status(store_url, "r1")[0] is oncelog.RunStatus.WAITING
    assert keys(markers) == []
    oncelog_cli(store_url, "approve", "r1", "wipe", "--by", "alice")
    _, stderr = agent.communicate(timeout=HANG)
    assert agent.returncode == 0, stderr  # woken by the decision, before its wait ran out
    assert len(keys(markers)) == 3
    with oncelog.open(store_url) as ledger:
        tokens = [e.data["token"] for e in ledger.journal("r1") if e.event == "lease_acquired"]
    assert len(tokens) == len(set(tokens)) == 2, tokens  # taken again, with the next token
    assert tokens == sorted(tokens), tokens


def test_a_denial_reaches_the_waiting_agent(db_path: str, tmp_path: Path) -> None:
    agent = start(db_path, "r1", tmp_path / "keys", 1, "--approval", "--wait", "60",
                  "--poll", "0.2")  # fmt: skip
    until(lambda: stopped_for_a_person(db_path, "r1"), "the run to wait for approval")
    oncelog_cli(db_path, "deny", "r1", "wipe", "--by", "alice")
    _, stderr = agent.communicate(timeout=TIMEOUT)
    assert agent.returncode == 1, stderr  # the agent's own code may handle a denial
    assert "ApprovalDenied" in stderr


def test_sigterm_while_waiting_exits_75_and_leaves_the_run_to_a_person(
    db_path: str, tmp_path: Path
) -> None:
    agent = start(db_path, "r1", tmp_path / "keys", 1, "--approval", "--wait", "600")
    until(lambda: stopped_for_a_person(db_path, "r1"), "the run to wait for approval")
    agent.send_signal(signal.SIGTERM)
    _, stderr = agent.communicate(timeout=HANG)  # its wait (600 s) is a hang
    assert agent.returncode == oncelog.EXIT_TRY_LATER, stderr
    assert status(db_path, "r1") == (oncelog.RunStatus.WAITING, None)


def test_no_decision_in_time_exits_as_without_waiting(db_path: str, tmp_path: Path) -> None:
    agent = start(db_path, "r1", tmp_path / "keys", 1, "--approval", "--wait", "0.5",
                  "--poll", "0.1")  # fmt: skip
    _, stderr = agent.communicate(timeout=TIMEOUT)
    assert agent.returncode == oncelog.EXIT_WAITING, stderr
    assert "no decision on run 'r1' in 0.5 s" in stderr


def test_wait_for_decision_in_process(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="destructive", name="wipe")
    def wipe(*, idempotency_key: str) -> str:
        return "wiped"

    with pytest.raises(oncelog.ApprovalRequired), ledger.run("r1") as run:
        run.effect("wipe", wipe)
    assert ledger.wait_for_decision("r1", timeout=0.1) is False
    ledger.approve("r1", "wipe", by="alice")
    assert ledger.wait_for_decision("r1", timeout=5) is True
    with ledger.run("r1") as run:
        assert run.effect("wipe", wipe) == "wiped"
    with pytest.raises(oncelog.UnknownRun):
        ledger.wait_for_decision("nobody", timeout=1)


def test_a_decision_made_while_the_run_was_stopping_is_not_missed(
    ledger: oncelog.Ledger,
) -> None:
    """The person approves before the run has closed (it still holds its lease, so the
    approval cannot queue it): the run ends ``waiting`` but the waiter sees the decision."""

    @ledger.tool(kind="destructive", name="wipe")
    def wipe(*, idempotency_key: str) -> str:
        return "wiped"

    with pytest.raises(oncelog.ApprovalRequired), ledger.run("r1") as run:
        try:
            run.effect("wipe", wipe)
        finally:
            ledger.approve("r1", "wipe", by="alice")
    assert ledger.get_run("r1").status is oncelog.RunStatus.WAITING
    assert ledger.wait_for_decision("r1", timeout=0.5) is True


def test_async_code_waits_for_a_decision(ledger: oncelog.Ledger) -> None:
    async def agent() -> tuple[bool, bool]:
        with pytest.raises(oncelog.RunHalted):
            async with ledger.run("r1") as run:
                await run.llm("think", think)
        before = await ledger.wait_for_decision_async("r1", timeout=0.1)
        await asyncio.to_thread(ledger.clear_halt, by="alice", run="r1")
        return before, await ledger.wait_for_decision_async("r1", timeout=5)

    ledger.halt("suspicious", by="detector", run="r1", ahead=True)
    assert asyncio.run(agent()) == (False, True)


def test_run_main_waits_in_process_and_goes_on(db_path: str) -> None:
    """The agent runs again after the decision (a person clears the kill switch from
    another thread here) and replays what it recorded."""
    calls: list[str] = []
    with oncelog.open(db_path, approval_poll=0.05) as ledger:
        ledger.halt("hold on", by="detector", run="r1", ahead=True)

        def agent() -> None:
            calls.append("agent")
            with ledger.run("r1") as run:
                run.llm("think", think)

        def person() -> None:
            until(lambda: [r.run_id for r in ledger.runs("halted")] == ["r1"], "the halt")
            ledger.clear_halt(by="alice", run="r1")

        clearing = threading.Thread(target=person)
        clearing.start()
        with pytest.raises(SystemExit) as ended:
            oncelog.run_main(agent, wait_for_person=30, drain_on_sigterm=False)
        clearing.join()
    assert ended.value.code == 0
    assert calls == ["agent", "agent"]


@pytest.mark.parametrize("bad", [0, -1.0, True])
def test_a_bad_wait_is_refused(bad: float) -> None:
    with pytest.raises(oncelog.ConfigurationError):
        oncelog.run_main(lambda: None, wait_for_person=bad, drain_on_sigterm=False)


# -- telling a person, once ---------------------------------------------------------------


@pytest.mark.slow
def test_a_crash_loop_pages_once_per_halt(db_path: str, tmp_path: Path, receiver: Receiver) -> None:
    """An email in doubt, then a supervisor restarting the agent again and again (some
    restarts SIGKILLed at random instants): one notice for that halt, whatever the
    number of restarts; a kill switch set later is a new halt and pages once more."""
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    markers, hook = tmp_path / "keys", ("--webhook", receiver.url)
    first = start(db_path, "r1", markers, 2, *hook, crash="after_call@send-0")
    first.communicate(timeout=TIMEOUT)
    assert first.returncode == -signal.SIGKILL
    for restart in range(12):
        agent = start(db_path, "r1", markers, 2, *hook)
        if restart % 2:
            time.sleep(chance.uniform(0.0, 0.4))
            agent.send_signal(signal.SIGKILL)
        _, stderr = agent.communicate(timeout=TIMEOUT)
        assert agent.returncode in (oncelog.EXIT_HALTED, -signal.SIGKILL), (seed, stderr)
    final = start(db_path, "r1", markers, 2, *hook)
    _, stderr = final.communicate(timeout=TIMEOUT)
    assert final.returncode == oncelog.EXIT_HALTED, (seed, stderr)
    ids = {str(body["id"]) for body in receiver.bodies}
    assert len(ids) == 1, (seed, receiver.bodies)
    assert ids.pop().startswith("unknown:r1:send-0:")
    body = receiver.bodies[0]
    assert (body["event"], body["kind"], body["error"]) == (
        "oncelog.person.needed", "halted", "AmbiguousOutcome",
    )  # fmt: skip
    with oncelog.open(db_path) as ledger:
        events = [e.event for e in ledger.journal("r1")]
    assert events.count("person_needed") == 1, (seed, events)

    oncelog_cli(db_path, "resolve", "r1", "send-0", "not_done", "--by", "alice")
    oncelog_cli(db_path, "halt", "--run", "r1", "--reason", "audit", "--by", "bob")
    for _ in range(3):
        agent = start(db_path, "r1", markers, 2, *hook)
        agent.communicate(timeout=TIMEOUT)
        assert agent.returncode == oncelog.EXIT_HALTED
    halts = [b for b in receiver.bodies if str(b["id"]).startswith("halt:")]
    assert len(halts) == 1, receiver.bodies
    assert halts[0]["error"] == "RunHalted"


def test_notices_reach_on_alert_and_budget_alerts_still_reach_on_budget_alert(
    store_url: str,
) -> None:
    alerts: list[object] = []
    budget_alerts: list[object] = []
    with oncelog.open(
        store_url, on_alert=alerts.append, on_budget_alert=budget_alerts.append
    ) as watched:

        @watched.tool(kind="destructive", name="wipe", cost=1.0)
        def wipe(*, idempotency_key: str) -> str:
            return "wiped"

        @watched.tool(kind="create", name="send", cost=1.0)
        def send(*, idempotency_key: str) -> str:
            return "sent"

        for _ in range(3):  # three restarts, one request: one notice
            with pytest.raises(oncelog.ApprovalRequired), watched.run("r1") as run:
                run.effect("wipe", wipe)
        budget = oncelog.Budget(cost=0.5, on_exceed="escalate")
        with pytest.raises(oncelog.BudgetPaused), watched.run("r2", budget=budget) as run:
            run.effect("send", send)
    notices = [a for a in alerts if isinstance(a, oncelog.PersonNeeded)]
    assert [(n.kind, n.error, n.run_id, n.step_id) for n in notices] == [
        ("waiting", "ApprovalRequired", "r1", "wipe")
    ]
    assert notices[0].id.startswith("approval:")
    assert [a for a in alerts if isinstance(a, oncelog.BudgetAlert)] == budget_alerts
    assert len(budget_alerts) == 1  # a budget stop is told by its budget alert alone


def test_a_failed_delivery_is_tried_again_at_the_next_stop(ledger: oncelog.Ledger) -> None:
    tries: list[str] = []

    def flaky(alert: object) -> None:
        assert isinstance(alert, oncelog.PersonNeeded)
        tries.append(alert.id)
        if len(tries) == 1:
            raise ConnectionError("the pager is down")

    ledger.halt("audit", by="bob", run="r1", ahead=True)
    with oncelog.open(ledger.url, on_alert=flaky) as watched:
        for _ in range(3):
            with pytest.raises(oncelog.RunHalted), watched.run("r1") as run:
                run.llm("think", think)
    assert len(tries) == 2, tries
    assert len(set(tries)) == 1


def test_a_waiting_process_delivers_a_failed_notice_again(
    ledger: oncelog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oncelog.controls._waiting, "REDELIVER_EVERY", 0.05)
    tries: list[str] = []

    def flaky(alert: object) -> None:
        assert isinstance(alert, oncelog.PersonNeeded)
        tries.append(alert.id)
        if len(tries) == 1:
            raise ConnectionError("the pager is down")

    ledger.halt("audit", by="bob", run="r1", ahead=True)
    with oncelog.open(ledger.url, on_alert=flaky, approval_poll=0.02) as watched:
        with pytest.raises(oncelog.RunHalted), watched.run("r1") as run:
            run.llm("think", think)
        assert watched.wait_for_decision("r1", timeout=0.5) is False
    assert len(tries) == 2, tries  # delivered while waiting, then never again
    assert len(set(tries)) == 1


def test_run_main_does_not_wait_on_what_no_decision_changes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def diverges() -> None:
        raise oncelog.ReplayDivergence("the code took another path", run_id="r1")

    with pytest.raises(SystemExit) as ended:
        oncelog.run_main(diverges, wait_for_person=60, drain_on_sigterm=False)
    assert ended.value.code == oncelog.EXIT_HALTED
    assert "waiting up to" not in capsys.readouterr().err  # what a wait would say first


def test_a_stop_carries_how_to_wait_for_its_decision(store_url: str) -> None:
    """What ``run_main`` waits with comes with the stop, not from a list of stopped runs:
    on the ledger's store while it is open, on one opened again from its URL once it is
    closed. A stop no run raised (made by the agent's code, or unpickled) carries none."""
    with oncelog.open(store_url, approval_poll=0.05) as ledger:

        @ledger.tool(kind="destructive", name="wipe")
        def wipe(*, idempotency_key: str) -> str:
            return "wiped"

        with pytest.raises(oncelog.ApprovalRequired) as stopped, ledger.run("r1") as run:
            run.effect("wipe", wipe)
        wait = stopped.value.wait_for_decision
        assert wait is not None
        assert wait(0.1, "waiter-1") is False
    with oncelog.open(store_url) as person:
        person.approve("r1", "wipe", by="alice")
    assert wait(5, "waiter-1") is True
    assert pickle.loads(pickle.dumps(stopped.value)).wait_for_decision is None
    assert oncelog.NeedsPerson("made by hand", run_id="r1").wait_for_decision is None


def test_a_raised_budget_is_a_decision(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="create", name="send", cost=1.0)
    def send(*, idempotency_key: str) -> str:
        return "sent"

    budget = oncelog.Budget(cost=0.5, on_exceed="pause")
    with pytest.raises(oncelog.BudgetPaused), ledger.run("r1", budget=budget) as run:
        run.effect("send", send)
    assert ledger.wait_for_decision("r1", timeout=0.1) is False
    ledger.set_budget("r1", oncelog.Budget(cost=5), by="alice")
    assert ledger.wait_for_decision("r1", timeout=5) is True
    with ledger.run("r1") as run:
        assert run.effect("send", send) == "sent"


def test_a_run_taken_by_another_process_while_this_one_waits(store_url: str) -> None:
    """While one process waits, another takes the run after the decision and completes
    it: the waiter sees the run moved on, and its own run again only replays, with a
    newer fencing token; the effect happened once."""
    wiped: list[str] = []

    def open_with_wipe() -> tuple[oncelog.Ledger, oncelog.Tool[..., str]]:
        ledger = oncelog.open(store_url)

        @ledger.tool(kind="destructive", name="wipe")
        def wipe(*, idempotency_key: str) -> str:
            wiped.append(idempotency_key)
            return "wiped"

        return ledger, wipe

    waiter, wipe = open_with_wipe()
    with waiter:
        with pytest.raises(oncelog.ApprovalRequired), waiter.run("r1") as run:
            run.effect("wipe", wipe)
        waiter.approve("r1", "wipe", by="alice")
        other, other_wipe = open_with_wipe()
        with other, other.run("r1") as run:
            assert run.effect("wipe", other_wipe) == "wiped"
        assert waiter.wait_for_decision("r1", timeout=5) is True
        with waiter.run("r1") as run:
            assert run.effect("wipe", wipe) == "wiped"  # replayed
            token = run.fencing_token
        tokens = [e.data["token"] for e in waiter.journal("r1") if e.event == "lease_acquired"]
    assert len(wiped) == 1
    assert tokens == [1, 2, 3]
    assert token == 3
