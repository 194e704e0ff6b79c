"""Kill a real agent process at every named crash point, restart it, and count effects at a
provider that is a separate process.

Each case: the agent (an llm step, a read, three effects of one kind, each a POST to the
provider with its idempotency key) is SIGKILLed at one point of one effect, either by
``ONCELOG_CRASH_AT`` or by the provider itself after performing the effect and before
answering. Then it is run again until it completes, with an operator resolving a halt from
the provider's records. Everything asserted is read from the provider's own file and from
the ledger, never taken from the agent's word.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import oncelog
from oncelog import RunStatus, StepState

from .support import (
    AgentExit,
    AgentSetup,
    Provider,
    assert_intents_preceded_effects,
    read_ledger,
    resolve_from_provider,
    run_agent,
    running_provider,
)
from .support.launch import environment, run_python

PROVIDER_KILL = "provider_kill_before_answer"
CRASH_POINTS = (
    "before_intent_commit",
    "after_intent_commit",
    PROVIDER_KILL,
    "after_call",
    "before_outcome_commit",
    "after_outcome_commit",
)
# Killed here, the agent cannot know whether the provider acted.
OUTCOME_UNKNOWN = {"after_intent_commit", PROVIDER_KILL, "after_call", "before_outcome_commit"}
# Killed here, the provider has performed the effect.
PERFORMED_AT_KILL = {PROVIDER_KILL, "after_call", "before_outcome_commit", "after_outcome_commit"}
WHERE = {"first": "effect-1", "middle": "effect-2", "last": "effect-3"}
# create and upsert at every position; payment (also halts when unknown) in the middle.
CASES = [(where, kind) for where in WHERE for kind in ("create", "upsert")] + [
    ("middle", "payment")
]


@pytest.fixture(scope="module", params=["honours_keys", "ignores_keys"])
def provider(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Provider]:
    with running_provider(tmp_path_factory.mktemp("provider"), request.param) as running:
        yield running


@dataclass(frozen=True)
class Case:
    setup: AgentSetup
    provider: Provider
    point: str
    step: str
    kind: str

    @property
    def run_id(self) -> str:
        return self.setup.run_id

    @property
    def unknown(self) -> bool:
        return self.point in OUTCOME_UNKNOWN

    @property
    def performed_at_kill(self) -> bool:
        return self.point in PERFORMED_AT_KILL

    @property
    def halts(self) -> bool:
        """create and payment never re-run an unknown effect by themselves."""
        return self.unknown and self.kind != "upsert"

    @property
    def performed_twice(self) -> bool:
        """The accepted cost of ``upsert``: re-run when unknown, and a provider that ignores
        the key performs it again (harmless for a true upsert)."""
        return (
            self.kind == "upsert"
            and self.performed_at_kill
            and self.unknown
            and (not self.provider.honours_keys)
        )

    def key(self, step: str) -> str:
        return oncelog.idempotency_key(self.run_id, step, f"provider.{self.kind}")

    def keys(self) -> dict[str, str]:
        return {step: self.key(step) for step in self.setup.effect_steps}


def kill_agent(case: Case) -> AgentExit:
    if case.point == PROVIDER_KILL:
        return run_agent(case.setup, kill_before_answer=case.step)
    return run_agent(case.setup, crash_at=f"{case.point}@{case.step}")


def check_state_at_kill(case: Case) -> None:
    """Right after the kill: the steps before are done and performed once, the killed one
    is exactly where the point says, nothing after it started."""
    view = read_ledger(case.setup.ledger, case.run_id)
    counts = case.provider.counts(case.run_id)
    assert_intents_preceded_effects(case.setup.ledger, case.run_id, case.provider)
    steps = case.setup.effect_steps
    killed_at = steps.index(case.step)
    for step in steps[:killed_at]:
        assert view.steps[step].state is StepState.DONE
        assert counts[case.key(step)] == 1
    for step in steps[killed_at + 1 :]:
        assert step not in view.steps
        assert counts[case.key(step)] == 0
    if case.point == "before_intent_commit":
        assert case.step not in view.steps, "an uncommitted intent survived the kill"
    else:
        expected = StepState.DONE if case.point == "after_outcome_commit" else StepState.IN_FLIGHT
        assert view.steps[case.step].state is expected
        assert view.steps[case.step].key == case.key(case.step)
    assert counts[case.key(case.step)] == int(case.performed_at_kill)
    assert sum(counts.values()) == killed_at + int(case.performed_at_kill)
    killed_by_provider = [r.key for r in case.provider.requests(case.run_id) if r.killed]
    assert killed_by_provider == ([case.key(case.step)] if case.point == PROVIDER_KILL else [])


def resume_through_halt(case: Case) -> AgentExit:
    """Restart; an unknown create/payment must halt (exit 3) with the effect performed at
    most once, and completes once an operator resolves it from the provider's records."""
    resumed = run_agent(case.setup)
    if not case.halts:
        return resumed
    assert resumed.returncode == oncelog.EXIT_HALTED, str(resumed)
    assert "AmbiguousOutcome" in resumed.stderr
    view = read_ledger(case.setup.ledger, case.run_id)
    assert view.run.status is RunStatus.HALTED
    assert view.steps[case.step].state is StepState.UNKNOWN
    assert case.provider.counts(case.run_id)[case.key(case.step)] == int(case.performed_at_kill)
    decisions = resolve_from_provider(case.setup.ledger, case.run_id, case.provider)
    assert decisions == {case.step: "done" if case.performed_at_kill else "not_done"}
    return run_agent(case.setup)


def check_completed(case: Case, final: AgentExit) -> None:
    assert final.returncode == oncelog.EXIT_COMPLETED, str(final)
    view = read_ledger(case.setup.ledger, case.run_id)
    effects = case.provider.effects(case.run_id)
    counts = case.provider.counts(case.run_id)
    keys = case.keys()
    assert view.run.status is RunStatus.COMPLETED
    assert {view.steps[s].key for s in keys} == set(keys.values()) == set(counts)
    for step, key in keys.items():
        twice = case.performed_twice and step == case.step
        assert counts[key] == (2 if twice else 1), f"{step} performed {counts[key]} times"
        assert view.steps[step].state is StepState.DONE
        # Every performance of this step's payload carried the one deterministic key.
        assert {e.key for e in effects if e.payload["step"] == step} == {key}
        responses = [e.response for e in effects if e.key == key]
        expected = responses[0] if case.provider.honours_keys else responses[-1]
        assert view.steps[step].result == expected == final.results()[step]
    assert case.provider.total(case.run_id) == len(keys) + int(case.performed_twice)
    # Requests, not just effects: a provider that honours keys would hide a silent resend.
    sent = Counter(r.key for r in case.provider.requests(case.run_id))
    resent = case.kind == "upsert" and case.unknown and case.performed_at_kill
    assert sent == {key: 2 if resent and step == case.step else 1 for step, key in keys.items()}
    assert_intents_preceded_effects(case.setup.ledger, case.run_id, case.provider)
    check_attempts_and_journal(case, view.steps[case.step].attempts, view.events)


def check_attempts_and_journal(case: Case, attempts: int, events: list[str]) -> None:
    # A second intent is written when the step runs again: an idempotent re-run, or a
    # create/payment a person resolved as not done. A `done` resolution writes none.
    reran = case.unknown and (case.kind == "upsert" or not case.performed_at_kill)
    assert attempts == (2 if reran else 1)
    assert ("unknown" in events) == case.halts
    assert ("resolved" in events) == case.halts
    assert "run_halted" not in events or case.halts
    if case.provider.honours_keys and case.kind == "upsert" and case.unknown:
        outcomes = [r.outcome for r in case.provider.requests(case.run_id)]
        assert outcomes.count("replayed") == int(case.performed_at_kill)


@pytest.mark.parametrize(("where", "kind"), CASES)
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_at_crash_point_then_resume(
    provider: Provider, tmp_path: Path, point: str, where: str, kind: str
) -> None:
    """Killed at ``point`` in the ``where`` effect: no effect starts before its intent is
    durable, a done one never runs again, an unknown create/payment halts until a person
    decides, and in the end each effect happened once (an upsert at a provider that
    ignores keys: twice at most, with one key and two recorded attempts)."""
    setup = AgentSetup(tmp_path / "ledger.db", f"{point}-{where}-{kind}", provider.url, (kind,) * 3)
    case = Case(setup, provider, point, WHERE[where], kind)

    crashed = kill_agent(case)
    assert crashed.killed, f"the agent was not killed at {point}: {crashed}"
    check_state_at_kill(case)

    final = resume_through_halt(case)
    check_completed(case, final)


@pytest.mark.parametrize("provider", ["honours_keys"], indirect=True)
@pytest.mark.parametrize(
    "point", ["before_intent_commit", "after_intent_commit", "after_call", "after_outcome_commit"]
)
def test_unqualified_crash_point_counts_effects_only(
    provider: Provider, tmp_path: Path, point: str
) -> None:
    """Crash points are placed in effects only (the brief: "Effects only (not read/llm)"),
    so ``<point>:2`` must kill at the second effect whatever llm and read steps come first."""
    setup = AgentSetup(tmp_path / "ledger.db", f"unqualified-{point}", provider.url)
    crashed = run_agent(setup, crash_at=f"{point}:2")
    assert crashed.killed, str(crashed)
    view = read_ledger(setup.ledger, setup.run_id)
    recorded = {step: record.state for step, record in view.steps.items()}
    assert recorded.get("effect-1") is StepState.DONE, (
        f"{point}:2 killed the agent before its first effect finished; recorded steps: "
        f"{ {step: state.value for step, state in recorded.items()} }"
    )
    assert ("effect-2" in view.steps) == (point != "before_intent_commit")


@pytest.mark.parametrize("fds", [None, "7", "a,b"])
def test_a_pause_point_without_its_pipes_fails_at_import(fds: str | None) -> None:
    """A pause armed with no way to say it is reached, or to be released, would hang its
    process for ever: oncelog refuses to load instead."""
    extra = {"ONCELOG_PAUSE_AT": "after_call"} | ({} if fds is None else {"ONCELOG_PAUSE_FDS": fds})
    done = run_python("-c", "import oncelog.signals._crashpoints", env=environment(**extra))
    assert done.returncode == 1
    assert "ONCELOG_PAUSE_FDS=<reached fd>,<release fd>" in done.stderr
