"""What the tests read from the ledger between two runs of the agent, and what an operator
does to it: resolve effects in doubt, taking the provider's own records as the truth."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import oncelog
from oncelog import RunRecord, StepRecord, StepState

from .provider_process import Provider

IN_DOUBT = (StepState.IN_FLIGHT, StepState.UNKNOWN)


@dataclass(frozen=True)
class LedgerView:
    """The run and its steps, read with a fresh handle (as another process would)."""

    run: RunRecord
    steps: dict[str, StepRecord]
    events: list[str]

    def keys(self) -> dict[str, str]:
        """Idempotency key -> step id, for every recorded effect."""
        return {s.key: s.step_id for s in self.steps.values() if s.type.value == "effect"}


def read_ledger(path: Path | str, run_id: str) -> LedgerView:
    with oncelog.open(str(path)) as ledger:
        run = ledger.get_run(run_id)
        steps = {step.step_id: step for step in ledger.steps(run_id)}
        events = [entry.event for entry in ledger.iter_journal(run_id)]
    return LedgerView(run, steps, events)


def resolve_from_provider(path: Path | str, run_id: str, provider: Provider) -> dict[str, str]:
    """Decide every effect in doubt as an operator would after asking the provider: ``done``
    with its answer if it performed the key, else ``not_done``. Returns step id -> decision."""
    decisions: dict[str, str] = {}
    with oncelog.open(str(path)) as ledger:
        for step in ledger.steps(run_id):
            if step.state not in IN_DOUBT:
                continue
            response = provider.first_response(run_id, step.key)
            if response is None:
                ledger.resolve(run_id, step.step_id, "not_done", by="operator", note="no record")
                decisions[step.step_id] = "not_done"
            else:
                note = f"provider effect {response['effect_id']}"
                ledger.resolve(
                    run_id, step.step_id, "done", by="operator", result=response, note=note
                )
                decisions[step.step_id] = "done"
    return decisions


def assert_intents_preceded_effects(path: Path | str, run_id: str, provider: Provider) -> None:
    """Invariant 1, checked twice: at the instant the provider performed each effect it
    found the key's step durable and ``in_flight`` in the ledger (the provider read the
    ledger file itself), and now the ledger holds a step with every performed key."""
    effects = provider.effects(run_id)
    if not effects:
        return  # nothing performed, nothing to check (the run may not even exist yet)
    known = read_ledger(path, run_id).keys()
    for effect in effects:
        assert effect.intent_state == StepState.IN_FLIGHT.value, (
            f"the provider performed {effect.key} while the ledger showed "
            f"{effect.intent_state!r} for it: no durable intent before the call"
        )
        assert effect.key in known, f"performed key {effect.key} has no step in the ledger"
