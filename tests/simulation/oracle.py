"""The oracle: what must hold after every schedule, judged from what the provider
performed (the truth) against what the ledger recorded.

- ``twice``: no logical operation (a step, or a subject in one period) performed twice
  (an ``upsert`` aside, which a restart may make again by design);
- ``lost``: no step recorded done whose operation the provider never performed (the
  person is truthful, so a "done" of theirs is never the cause);
- ``past_stop``: no run completed with one of its effects not done;
- ``stuck``: every run that stopped was moved on to an end by documented actions;
- ``unexpected``: no run ended on an exception that is not a documented end (a person's
  denial or abandon, a refusal left as it is, ``repeat="error"``'s ``SubjectDone``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import oncelog

from .driver import Outcome
from .schedule import op_of, ref_of


@dataclass(frozen=True, order=True)
class Finding:
    """What broke (``family``), said for a person, with the operation and the idempotency
    keys it concerns (for ``twice``, the keys it was performed under; for ``lost``, the
    step's)."""

    family: str
    text: str
    op: tuple[Any, ...] = ()
    keys: tuple[str, ...] = ()


def check(outcome: Outcome) -> list[Finding]:
    return sorted({*_twice(outcome), *_lost(outcome), *_past_stop(outcome), *_stuck(outcome)})


def _twice(outcome: Outcome) -> list[Finding]:
    if outcome.schedule.declaration.kind == "upsert":
        return []  # an idempotent kind may be made again: the world is as after one
    counts = Counter(item.op for item in outcome.items)
    found = []
    for op, n in counts.items():
        if n > 1:
            keys = tuple(item.key for item in outcome.items if item.op == op)
            short = [key[:12] for key in keys]
            found.append(Finding("twice", f"{op} performed {n} times, keys {short}", op, keys))
    return found


def _lost(outcome: Outcome) -> list[Finding]:
    found = []
    performed = {item.op for item in outcome.items}
    for agent in outcome.schedule.agents:
        calls = {call.step: call for call in agent.calls}
        for step in outcome.steps.get(agent.run_id, []):
            op = op_of(calls[step.step_id].item, ref_of(outcome.schedule, agent, step.step_id))
            if step.state is oncelog.StepState.DONE and op not in performed:
                text = f"{agent.run_id}/{step.step_id} recorded done, but {op} was never performed"
                found.append(Finding("lost", text, op, (step.key,)))
    return found


def _past_stop(outcome: Outcome) -> list[Finding]:
    found = []
    for agent in outcome.schedule.agents:
        record = outcome.runs.get(agent.run_id)
        if record is None or record.status is not oncelog.RunStatus.COMPLETED:
            continue
        states = {s.step_id: s.state for s in outcome.steps.get(agent.run_id, [])}
        for call in agent.calls:
            if states.get(call.step) is not oncelog.StepState.DONE:
                found.append(Finding("past_stop", f"{agent.run_id} completed with "
                                     f"{call.step} {states.get(call.step)}"))  # fmt: skip
    return found


def _stuck(outcome: Outcome) -> list[Finding]:
    found = [Finding("stuck", f"{run}: {why}") for run, why in outcome.stuck.items()]
    for decision in outcome.decisions:
        if decision.action == "unexpected":
            found.append(Finding("unexpected", f"{decision.run_id} ended on {decision.stop}"))
    return found
