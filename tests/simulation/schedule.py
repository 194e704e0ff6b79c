"""A schedule: everything one simulated history depends on, as plain data, drawn from a
seed. The driver adds no randomness of its own, so a schedule replays exactly, and the
shrinker and the printer work on this data alone."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

KINDS = ("create", "payment", "destructive", "upsert")
PROBES = ("none", "truthful", "cannot_tell", "raising", "marker")
FAULTS = ("ok", "refuse", "reset_before", "reset_after", "late")
POINTS = (
    "before_intent_commit",
    "after_intent_commit",
    "after_call",
    "before_outcome_commit",
    "after_outcome_commit",
)
# A subject's claim lasts ONCE_FOR after its intent; period k starts at k * PERIOD and a
# period's own clock steps stay under IN_PERIOD, so a claim of period k-1 has expired when
# period k starts and one of period k holds all through it: which period an effect
# belongs to is then a fact of the schedule, not of the engine.
ONCE_FOR = 1000.0
PERIOD = 2 * ONCE_FOR
IN_PERIOD = 400.0


@dataclass(frozen=True)
class Declaration:
    """How the one tool of a schedule is declared, and the provider it calls."""

    kind: str = "create"
    subject: bool = False  # once_per: the effect's subject is the call's ``item``
    periodic: bool = False  # once_for=ONCE_FOR (with subject)
    repeat_error: bool = False  # repeat="error"
    probe: str = "none"
    preflight: bool = False  # a truthful preflight, by key
    dedupe: float = 0.0  # seconds the provider keeps keys (0: none)
    declare_window: bool = False  # dedupe_window=dedupe (truthful: only if dedupe)
    failures: bool = False  # the truthful classifier of the provider's errors
    retry: int = 0  # Retry(attempts=...) (0: none)
    approval: str = "none"  # "none", "always" or "policy" (amounts over 100)
    lag: float = 0.0  # seconds before the provider's search shows an item
    consistent: bool = False  # the MarkerProbe declares consistent_after (> lag)


@dataclass(frozen=True)
class Call:
    """One effect of an agent's script: its step, what it acts on and its amount."""

    step: str
    item: tuple[str | int | float, ...]
    amount: int = 10


@dataclass(frozen=True)
class Agent:
    """One run: its id, its agent's name, its period and its script."""

    run_id: str
    agent: str
    period: int
    calls: tuple[Call, ...]


@dataclass(frozen=True)
class Schedule:
    """``faults``: what the provider's calls do, in order (then "ok"). ``crashes``: the
    crash point armed in each process started, in order (then none), and which visit of
    it kills. ``ticks``: seconds the clock steps before each effect a script calls (then
    0).
    ``decisions``: which truthful action a person takes at each stop (then the first)."""

    seed: int
    declaration: Declaration
    agents: tuple[Agent, ...]
    faults: tuple[str, ...] = ()
    crashes: tuple[tuple[str, int] | None, ...] = ()
    ticks: tuple[int, ...] = ()
    decisions: tuple[int, ...] = ()


def ref_of(schedule: Schedule, agent: Agent, step: str) -> str:
    """What the tool is told of the logical operation besides its item: the period for a
    subject (the same in every run, so that runs on one subject call with the same
    arguments), else the run and step."""
    if schedule.declaration.subject:
        return f"p{agent.period if schedule.declaration.periodic else 0}"
    return f"{agent.run_id}/{step}"


def op_of(item: Any, ref: str) -> tuple[Any, ...]:
    """The logical operation of a call: its subject's parts, which compare as Python
    values do (42 and 42.0 are one subject), and its period, or its run and step."""
    return (tuple(item), ref)


def generate(seed: int) -> Schedule:
    """The schedule of ``seed``: every choice drawn from one ``random.Random(seed)``."""
    rng = random.Random(seed)
    declaration = _declaration(rng)
    agents = _agents(rng, declaration)
    calls = sum(len(agent.calls) for agent in agents)
    faults = tuple(rng.choice(FAULTS) if rng.random() < 0.4 else "ok" for _ in range(calls * 2))
    crashes = tuple(
        (rng.choice(POINTS), rng.randint(1, 2)) if rng.random() < 0.5 else None
        for _ in range(len(agents) * 2)
    )
    ticks = tuple(rng.choice((0, 0, 1, 5, 20, 60)) for _ in range(calls * 2))
    decisions = tuple(rng.randrange(4) for _ in range(8))
    return Schedule(seed, declaration, agents, faults, crashes, ticks, decisions)


def _declaration(rng: random.Random) -> Declaration:
    subject = rng.random() < 0.6
    dedupe = rng.choice((0.0, 0.0, 30.0, 300.0))
    probe = rng.choice(PROBES)
    return Declaration(
        kind=rng.choice(KINDS),
        subject=subject,
        periodic=subject and rng.random() < 0.6,
        repeat_error=subject and rng.random() < 0.15,
        probe=probe,
        preflight=rng.random() < 0.15,
        dedupe=dedupe,
        declare_window=dedupe > 0 and rng.random() < 0.7,
        failures=rng.random() < 0.4,
        retry=rng.choice((0, 0, 2, 3)),
        approval=rng.choice(("none", "none", "none", "always", "policy")),
        lag=rng.choice((0.0, 0.0, 3.0, 30.0)),
        consistent=probe == "marker" and rng.random() < 0.5,
    )


def _agents(rng: random.Random, declaration: Declaration) -> tuple[Agent, ...]:
    periods = rng.randint(1, 3) if declaration.periodic else 1
    agents = []
    for number in range(rng.randint(1, 4)):
        calls = []
        for position in range(rng.randint(1, 3)):
            order = rng.choice((42, 42, 7))
            # The same number written as an int or a float is the same subject.
            item = ("refund", float(order) if rng.random() < 0.3 else order)
            # An order's amount is the same in every call, so that two calls on one
            # subject differ at most in how the number is written.
            calls.append(Call(f"s{position}", item, 250 if order == 42 else 10))
        agents.append(
            Agent(f"run-{number}", rng.choice(("billing", "support")), rng.randrange(periods),
                  tuple(calls))
        )  # fmt: skip
    return tuple(sorted(agents, key=lambda agent: agent.period))
