"""No state without a way out: every state a step or a run can be left in (the table of
``docs/operations.md``) is reached by a real agent process, the way on that the table names
for it is found there and run as a person types it, and the run then goes on to complete,
with every effect performed once, counted outside the ledger. Both stores.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import oncelog

from .support.launch import environment, python, run_python

ROOT = Path(__file__).parent.parent
AGENT = Path(__file__).parent / "retry_agents" / "states.py"
RUN = "o-1"


def table() -> dict[str, str]:
    """The operations page's table: each state's cell, and its way on."""
    text = (ROOT / "docs" / "operations.md").read_text()
    rows = re.findall(r"^\| (.+?) \| .+? \| (.+?) \|$", text, re.M)
    return {state: way for state, way in rows if state not in ("State", "---")}


@dataclass(frozen=True)
class Agent:
    """Start the agent (``mode``: how the provider behaves) and expect its exit code."""

    mode: str
    code: int
    run_id: str = RUN
    crash_at: str | None = None


@dataclass(frozen=True)
class Command:
    """A person's ``oncelog`` command; ``said`` is in its output. One that only brings
    the state about (``setup``) is not the way on the table must name."""

    args: tuple[str, ...]
    said: str = ""
    setup: bool = False


@dataclass(frozen=True)
class Kill:
    """Start the agent, and SIGKILL it once ``reached`` holds for the ledger."""

    mode: str
    reached: Callable[[oncelog.Ledger], bool]


@dataclass(frozen=True)
class Way:
    row: str  # the state's cell in the table
    scenario: str
    steps: tuple[Agent | Command | Kill, ...]
    sends: int = 1  # messages the provider ends up with


def cmd(*args: str, said: str = "", setup: bool = False) -> Command:
    return Command(args, said, setup)


def _waiting(ledger: oncelog.Ledger) -> bool:
    steps = ledger.steps(RUN)
    return (
        bool(steps)
        and steps[0].state is oncelog.StepState.NOT_DONE
        and steps[0].retry_at is not None
    )


OPS = ("--by", "ops")
WAYS = (
    Way("`completed`", "plain", (Agent("ok", 0), cmd("show", RUN, said="nothing is left to do"))),
    Way("`failed` after retries (`EffectRefused: not performed in N attempts`)", "retries", (
        Agent("fail", 3), Agent("ok", 3),  # the refusal replays: a restart alone is no way out
        cmd("retry", RUN, "send", *OPS, "--why", "the mail service is back"), Agent("ok", 0),
    )),
    Way("`failed`, refused by the provider (`EffectRefused`)", "refused", (
        Agent("fail", 3), cmd("retry", RUN, "send", *OPS, "--why", "quota raised"),
        Agent("ok", 0),
    )),
    Way("`not_done`, waiting for its next attempt", "waiting", (
        Kill("fail", _waiting), cmd("redrive", RUN, *OPS, "--why", "outage over"),
        Agent("ok", 0),
    )),
    Way("retries paused (`RetriesPaused`)", "waiting", (
        Kill("fail", _waiting),
        cmd("retry", RUN, "send", "--pause", *OPS, "--why", "fixing it", setup=True),
        Agent("ok", 3), cmd("retry", RUN, "send", "--resume", *OPS, "--why", "fixed"),
        Agent("ok", 0),
    )),
    Way("`in_flight`, its process killed", "killed", (
        Agent("ok", -signal.SIGKILL, crash_at="after_call"),
        cmd("resolve", RUN, "send", "done", "--result", '"sent to ada@example.com"', *OPS),
        Agent("ok", 0),
    )),
    Way("`unknown` (`AmbiguousOutcome`)", "unknown", (
        Agent("fail", 3), cmd("resolve", RUN, "send", "not_done", *OPS), Agent("ok", 0),
    ), sends=2),  # looked up and not found: sent again with the same key
    Way("`abandoned` (`EffectAbandoned`)", "abandoned", (
        Agent("fail", 3), cmd("resolve", RUN, "send", "abandon", *OPS), Agent("ok", 1),
        cmd("show", RUN, said="--correct"),
        cmd("resolve", RUN, "send", "not_done", "--correct", *OPS), Agent("ok", 0),
    ), sends=2),
    Way("preflight conflict (`PreflightConflict`)", "conflict", (
        Agent("fail", 3), cmd("resolve", RUN, "send", "not_done", *OPS), Agent("ok", 0),
    )),
    Way("halted by a kill switch (`RunHalted`)", "approval", (
        Agent("ok", 4), cmd("halt", "--run", RUN, "--reason", "incident", *OPS, setup=True),
        cmd("approve", RUN, "send", *OPS, setup=True), Agent("ok", 3),
        cmd("resume", "--run", RUN, *OPS), Agent("ok", 0),
    )),
    Way("budget stop (`BudgetExceeded`, `BudgetPaused`)", "budget", (
        Agent("ok", 3), cmd("budgets", RUN, "--set", "cost=5", *OPS), Agent("ok", 0),
    )),
    Way("approval pending (`ApprovalRequired`)", "approval", (
        Agent("ok", 4), cmd("approve", RUN, "send", *OPS), Agent("ok", 0),
    )),
    Way("approval denied (`ApprovalDenied`)", "denied", (
        Agent("ok", 4), cmd("deny", RUN, "send", *OPS, setup=True), Agent("ok", 1),
        cmd("show", RUN, said="start a new run"),
        Agent("ok", 4, run_id="o-2"), cmd("approve", "o-2", "send", *OPS),
        Agent("ok", 0, run_id="o-2"),
    )),
    Way("drift (`ArgumentDrift`, `ReplayDivergence`)", "drift", (
        Agent("fail", 1), Agent("drift", 3), cmd("show", RUN, said="fix the agent's code"),
        Agent("ok", 0),
    )),
)  # fmt: skip


def test_the_walk_covers_every_row_and_every_state() -> None:
    rows = table()
    assert set(rows) == {way.row for way in WAYS}
    states = " ".join(rows)
    for state in oncelog.StepState:
        if state is not oncelog.StepState.DONE:  # done: the run completes
            assert f"`{state.value}`" in states, state


@pytest.mark.parametrize("way", WAYS, ids=[w.scenario + "-" + str(i) for i, w in enumerate(WAYS)])
def test_every_state_has_a_documented_way_out(store_url: str, tmp_path: Path, way: Way) -> None:
    documented = table()[way.row]
    count = tmp_path / "sent"
    for step in way.steps:
        if isinstance(step, Command):
            if not step.setup and step.args[0] != "show":  # the way on the table names
                assert f"oncelog {step.args[0]}" in documented, (way.row, step.args)
            done = run_python("-m", "oncelog", *step.args, "--db", store_url)
            assert done.returncode == 0, (step.args, done.stdout, done.stderr)
            assert step.said in done.stdout, (step.args, done.stdout)
        elif isinstance(step, Kill):
            _kill_when(store_url, way.scenario, count, step)
        else:
            ended = run_python(
                AGENT, store_url, step.run_id, way.scenario, count, step.mode,
                env=environment(step.crash_at),
            )  # fmt: skip
            assert ended.returncode == step.code, (step, ended.stdout, ended.stderr)
    sent = count.read_text().splitlines() if count.exists() else []
    assert len(sent) == way.sends, sent
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok
        assert ledger.get_run(RUN if way.scenario != "denied" else "o-2").status is (
            oncelog.RunStatus.COMPLETED
        )


def _kill_when(store_url: str, scenario: str, count: Path, step: Kill) -> None:
    agent = subprocess.Popen(python(AGENT, store_url, RUN, scenario, count, step.mode))
    try:
        deadline = time.monotonic() + 30
        with oncelog.open(store_url) as ledger:
            while not _reached(ledger, step):
                assert agent.poll() is None, "the agent ended before it was killed"
                assert time.monotonic() < deadline, "the state was never reached"
                time.sleep(0.05)
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait()


def _reached(ledger: oncelog.Ledger, step: Kill) -> bool:
    try:
        return step.reached(ledger)
    except oncelog.UnknownRun:
        return False
