"""The driver: plays a schedule against the real engine and SQLite store, in this process.

Each run is an agent script (its calls, in order) started as a "process": the ledger is
opened, the run entered, the script played from the top (replay returns what is
recorded). A crash point armed for that process raises ``Crash`` there: the run is
abandoned as a killed process leaves it (no end recorded, its owner gone, which the next
start sees at once through ``process/_leases.is_dead``) and the store's connection is
closed, so an uncommitted transaction is lost. A run that stops for a person is handed to
the simulated person (``person.py``), then started again. Periods are played in order;
every run of a period is moved on to an end before the clock enters the next one.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections import deque
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, cast

import oncelog
from oncelog import testing

from . import person
from .schedule import IN_PERIOD, ONCE_FOR, PERIOD, Agent, Schedule, op_of, ref_of
from .world import (
    EPOCH,
    Crash,
    CrashPoints,
    Declined,
    Item,
    SimClock,
    SimProvider,
    classify,
    installed,
    simulate_time,
)

# Starts of one run before it counts as stuck: every fault and crash of a schedule is
# used up long before, so a run still not at an end has no way on.
MAX_STARTS = 30
_SHM = "/dev/shm"


@dataclass
class Outcome:
    """What a schedule left, for the oracle: the provider's items (the truth), each run's
    record and steps as the ledger has them, the person's decisions, and the runs that
    no documented action moved on."""

    schedule: Schedule
    items: list[Item]
    runs: dict[str, oncelog.RunRecord] = field(default_factory=dict)
    steps: dict[str, list[oncelog.StepRecord]] = field(default_factory=dict)
    decisions: list[person.Decision] = field(default_factory=list)
    stuck: dict[str, str] = field(default_factory=dict)
    ended: dict[str, str] = field(default_factory=dict)  # run -> the exception it ended on


def play(schedule: Schedule) -> Outcome:
    """Play ``schedule`` in a fresh ledger (on tmpfs where there is one)."""
    where = _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK) else None
    clock, points = SimClock(), CrashPoints()
    with (
        tempfile.TemporaryDirectory(prefix="oncelog-sim-", dir=where) as folder,
        installed(clock, points),
    ):
        return _Play(schedule, os.path.join(folder, "ledger.db"), clock, points).all()


class _Play:
    def __init__(self, schedule: Schedule, path: str, clock: SimClock, points: CrashPoints) -> None:
        declaration = schedule.declaration
        self.schedule, self.path, self.clock, self.points = schedule, path, clock, points
        self.provider = SimProvider(clock, declaration.dedupe, declaration.lag,
                                    list(schedule.faults))  # fmt: skip
        self.rng = random.Random(schedule.seed)
        self.ticks: Iterator[int] = iter(schedule.ticks)
        self.crashes = iter(schedule.crashes)
        self.person = person.Person(schedule, self.provider, iter(schedule.decisions))
        self.outcome = Outcome(schedule, self.provider.items)
        self.tool = self._declare()
        self.period_start = EPOCH

    def _declare(self) -> oncelog.Tool[..., Any]:
        d = self.schedule.declaration
        provider = self.provider

        def refund(item: list[Any], amount: int, ref: str, *, idempotency_key: str) -> Any:
            return provider.call(idempotency_key, op_of(item, ref), f"refund {item} of {amount}")

        approval: Any = {"none": False, "always": True}.get(d.approval)
        if d.approval == "policy":
            approval = lambda item, amount, ref: amount > 100  # noqa: E731
        declare = oncelog.tool(
            kind=cast("oncelog.KindName", d.kind), name="refund", refusals=(Declined,),
            probe=provider.probe(d.probe, d.consistent),
            preflight=provider.by_key if d.preflight else None,
            dedupe_window=d.dedupe if d.declare_window and d.dedupe else None,
            failures=classify if d.failures else None,
            retry=oncelog.Retry(attempts=d.retry, backoff=1, cap=4) if d.retry else None,
            approval=approval,
            once_per=(lambda item, amount, ref: tuple(item)) if d.subject else None,
            once_for=ONCE_FOR if d.periodic else None,
            repeat="error" if d.repeat_error else "replay",
            # Calls on one subject differ only in how a number is written (42, 42.0):
            # drift is a stop for fixing code, which no simulated person does.
            drift="warn",
        )  # fmt: skip
        return declare(refund)

    def _tick(self) -> None:
        step = next(self.ticks, 0)
        self.clock.advance(min(step, self.period_start + IN_PERIOD - self.clock.now))

    def all(self) -> Outcome:
        for period in sorted({agent.period for agent in self.schedule.agents}):
            self.period_start = EPOCH + period * PERIOD
            self.clock.advance(self.period_start - self.clock.now)
            self._period([a for a in self.schedule.agents if a.period == period])
        with oncelog.open(self.path, durability="process") as ledger:
            for agent in self.schedule.agents:
                self.outcome.runs[agent.run_id] = ledger.get_run(agent.run_id)
                self.outcome.steps[agent.run_id] = ledger.steps(agent.run_id)
        return self.outcome

    def _period(self, agents: list[Agent]) -> None:
        """Start each run in turn until each ends; a run that must wait for another goes
        to the back of the line."""
        line, starts = deque(agents), dict.fromkeys((a.run_id for a in agents), 0)
        while line:
            agent = line.popleft()
            starts[agent.run_id] += 1
            if starts[agent.run_id] > MAX_STARTS:
                self.outcome.stuck[agent.run_id] = self._why_stuck(agent)
                continue
            if not self._start(agent):
                line.append(agent)

    def _start(self, agent: Agent) -> bool:
        """One process playing ``agent``'s script; whether the run is at an end."""
        self.points.armed, self.points.hits = next(self.crashes, None), 0
        ledger = oncelog.open(self.path, durability="process")
        try:
            simulate_time(ledger, self.clock, self.rng)
            return self._script(ledger, agent)
        finally:
            ledger.close()

    def _script(self, ledger: oncelog.Ledger, agent: Agent) -> bool:
        context = ledger.run(agent.run_id, agent=agent.agent)
        try:
            run = context.__enter__()
        except oncelog.RunPruned:
            return True
        except oncelog.TryLater:
            return False
        try:
            for call in agent.calls:
                ref = ref_of(self.schedule, agent, call.step)
                # The clock steps between steps, never between the engine's decision and
                # its send: a request delayed past a key's whole window is not modelled.
                self._tick()
                run.effect(call.step, self.tool, list(call.item), call.amount, ref)
        except Crash:
            testing.abandon(run)
            return False
        except BaseException as exc:
            with suppress(Exception):  # what it raises is the stop itself, already in hand
                context.__exit__(type(exc), exc, exc.__traceback__)
            return self._after_stop(ledger, agent, exc)
        context.__exit__(None, None, None)
        self.outcome.ended.pop(agent.run_id, None)
        return True

    def _after_stop(self, ledger: oncelog.Ledger, agent: Agent, exc: BaseException) -> bool:
        """The person looks at a stopped run and acts; whether the run is at an end."""
        self.outcome.ended[agent.run_id] = type(exc).__name__
        if isinstance(exc, oncelog.TryLater):
            return False  # nothing to decide: a later start goes on
        decision = self.person.act(ledger, agent, exc)
        self.outcome.decisions.append(decision)
        return decision.action in person.END_ACTIONS

    def _why_stuck(self, agent: Agent) -> str:
        with oncelog.open(self.path, durability="process") as ledger:
            record = ledger.get_run(agent.run_id)
            return (f"{record.status.value} on {self.outcome.ended.get(agent.run_id)}; "
                    f"what_next: {ledger.what_next(agent.run_id)}")  # fmt: skip
