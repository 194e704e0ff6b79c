"""SIGKILL a real agent process at random instants, over and over, and count what happened.

The agent runs ten effects of mixed kinds against a provider process; small sleeps in the
tool and in the provider widen every window (intent durable but not sent, sent but not
performed, performed but not answered, answered but not recorded). The test kills it after
a random delay (seeded: the seed is printed, and ``ONCELOG_KILL_SEED`` pins it, which
repeats the delays though not the machine's timing), restarts it, and resolves any halt
the way an operator would: from the provider's records.

In the end, at a provider that honours keys every effect happened exactly once; at one
that ignores keys no create or payment happened twice (unknown ones halt instead of
retrying), and an upsert ran again only with its own key, never more often than the ledger
recorded attempts.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import oncelog
from oncelog import RunStatus, StepRecord, StepState

from .support import (
    AgentSetup,
    Provider,
    assert_intents_preceded_effects,
    read_ledger,
    resolve_from_provider,
    run_agent,
    running_provider,
)

KINDS = (
    *("create", "upsert", "payment", "create", "upsert"),
    *("create", "payment", "create", "upsert", "create"),
)
KILLS_PER_MODE = 15  # 30 kill/restart cycles across the two provider modes
MAX_RUNS_PER_MODE = 30  # runs stop being started once the kills are done
MAX_CYCLES_PER_RUN = 60  # a run that never finishes is a failure, not a hang
TOOL_SLEEP = 0.02  # in the tool, before the request and after the answer
PROVIDER_DELAY = 0.01  # in the provider, before performing and before answering
# A start (interpreter, import, replay) takes ~0.25 s and each new effect ~0.07 s, so a
# kill drawn in [0.15 s, that + remaining effects * that] nearly always lands in the run.
STARTUP_SECONDS = 0.25
EFFECT_SECONDS = 0.07
IN_FLIGHT_WINDOWS = ("intent durable, not performed", "intent durable, performed")


@dataclass
class Tally:
    """What the kills hit, for the printed summary and the coverage check."""

    kills: int = 0
    halts: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    windows: Counter[str] = field(default_factory=Counter)


def recorded_steps(setup: AgentSetup) -> dict[str, StepRecord]:
    """The run's steps, or none if the run was never created."""
    try:
        return read_ledger(setup.ledger, setup.run_id).steps
    except oncelog.UnknownRun:
        return {}


def window_of_kill(setup: AgentSetup, provider: Provider, steps_before: int) -> str:
    """Where the last kill landed, judged from the ledger and the provider afterwards."""
    steps = recorded_steps(setup)
    in_flight = [s for s in steps.values() if s.state is StepState.IN_FLIGHT]
    if in_flight:
        (step,) = in_flight
        performed = provider.counts(setup.run_id)[step.key]
        return IN_FLIGHT_WINDOWS[1] if performed else IN_FLIGHT_WINDOWS[0]
    return "between steps" if len(steps) > steps_before else "starting or replaying"


def check_done_not_repeated(setup: AgentSetup, provider: Provider, done: dict[str, int]) -> None:
    """Invariant 2: an effect recorded as done is never performed again. ``done`` maps the
    keys done so far to their counts; it is updated in place."""
    counts = provider.counts(setup.run_id)
    for key, count in done.items():
        assert counts[key] == count, f"done effect {key} was performed again"
    for step in recorded_steps(setup).values():
        if step.type.value == "effect" and step.state is StepState.DONE:
            done.setdefault(step.key, counts[step.key])


def in_flight_kills(tally: Tally) -> int:
    return sum(tally.windows[w] for w in IN_FLIGHT_WINDOWS)


def wants_more_kills(tally: Tally) -> bool:
    """The planned kills, and more (up to four times as many) until some land with an
    effect in flight: on a slow machine many kills land during start-up."""
    if tally.kills < KILLS_PER_MODE:
        return True
    return in_flight_kills(tally) < 2 and tally.kills < 4 * KILLS_PER_MODE


def drive_run(setup: AgentSetup, provider: Provider, rng: random.Random, tally: Tally) -> None:
    """Start, kill, restart and resolve until the run completes."""
    done: dict[str, int] = {}
    for _ in range(MAX_CYCLES_PER_RUN):
        steps_before = len(recorded_steps(setup))
        latest = STARTUP_SECONDS + (len(setup.kinds) - len(done)) * EFFECT_SECONDS
        kill_after = rng.uniform(0.15, latest) if wants_more_kills(tally) else None
        ended = run_agent(setup, kill_after=kill_after)
        assert_intents_preceded_effects(setup.ledger, setup.run_id, provider)
        check_done_not_repeated(setup, provider, done)
        if ended.killed:
            tally.kills += 1
            tally.windows[window_of_kill(setup, provider, steps_before)] += 1
        elif ended.returncode == oncelog.EXIT_HALTED:
            assert "AmbiguousOutcome" in ended.stderr, str(ended)
            tally.halts += 1
            decided = resolve_from_provider(setup.ledger, setup.run_id, provider)
            tally.decisions.update(decided.values())
        else:
            assert ended.returncode == oncelog.EXIT_COMPLETED, str(ended)
            check_final(setup, provider, ended.results())
            return
    pytest.fail(f"run {setup.run_id} did not complete in {MAX_CYCLES_PER_RUN} starts")


def check_final(setup: AgentSetup, provider: Provider, results: dict[str, object]) -> None:
    view = read_ledger(setup.ledger, setup.run_id)
    counts = provider.counts(setup.run_id)
    assert view.run.status is RunStatus.COMPLETED
    assert set(counts) == set(view.keys()), "the provider performed a key the ledger lacks"
    for step_id in setup.effect_steps:
        step = view.steps[step_id]
        assert step.state is StepState.DONE
        assert step.result == results[step_id]
        performed = counts[step.key]
        if provider.honours_keys or step.kind != "upsert":
            assert performed == 1, f"{step_id} ({step.kind}) performed {performed} times"
        else:
            # Re-run when in doubt, always with its own key: never more than attempted.
            assert 1 <= performed <= step.attempts, f"{step_id}: {performed=} {step.attempts=}"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["honours_keys", "ignores_keys"])
def test_random_kills_never_duplicate_effects(tmp_path: Path, mode: str) -> None:
    seed = int(os.environ.get("ONCELOG_KILL_SEED", random.SystemRandom().randrange(2**32)))
    print(f"ONCELOG_KILL_SEED={seed} mode={mode}")
    rng = random.Random(seed)
    tally = Tally()
    with running_provider(tmp_path / "provider", mode, delay=PROVIDER_DELAY) as provider:
        for n in range(MAX_RUNS_PER_MODE):
            if not wants_more_kills(tally):
                break
            ledger = tmp_path / "ledger.db"
            setup = AgentSetup(ledger, f"random-{n}", provider.url, KINDS, TOOL_SLEEP)
            drive_run(setup, provider, rng, tally)
    print(f"kills={tally.kills} halts={tally.halts} decisions={dict(tally.decisions)}")
    print(f"windows hit: {dict(tally.windows)}")
    assert tally.kills >= KILLS_PER_MODE, f"only {tally.kills} kills landed (seed {seed})"
    # The kills must have hit effects in flight, or the test proves nothing. (Which side
    # of the provider they hit is printed; the crash-point tests pin each window exactly.)
    assert in_flight_kills(tally) >= 1, f"seed {seed}: {tally}"
