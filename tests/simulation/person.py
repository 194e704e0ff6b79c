"""The simulated person: after a run stops, they take one documented action through the
public API, chosen by the schedule among the truthful ones. Truthful: they know what the
provider really did (they look at it), so a "done" is never said of an effect that was
not performed, and "not_done" never of one that was; the oracle's findings are then the
ledger's, never the person's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import oncelog

from .schedule import Agent, Schedule, op_of, ref_of
from .world import SimProvider

BY = "sim-person"
_IN_DOUBT = (oncelog.StepState.UNKNOWN, oncelog.StepState.IN_FLIGHT)
_NOT_PERFORMED = (oncelog.StepState.FAILED, oncelog.StepState.NOT_DONE)
# The actions after which a run stays where it ended; "unexpected" is the oracle's.
END_ACTIONS = ("accept", "leave", "unexpected")
# The agent's own ends, which a person's decision or the provider's refusal caused.
ENDS = (oncelog.EffectAbandoned, oncelog.ApprovalDenied, oncelog.SubjectDone)


@dataclass(frozen=True)
class Decision:
    """One action of the person: on which run and step, what, and why they chose it."""

    run_id: str
    step_id: str
    action: str
    stop: str  # the exception the run stopped on


class Person:
    def __init__(self, schedule: Schedule, provider: SimProvider, choices: Iterator[int]) -> None:
        self.schedule, self.provider, self.choices = schedule, provider, choices

    def act(self, ledger: oncelog.Ledger, agent: Agent, exc: BaseException) -> Decision:
        """The action taken. ``END_ACTIONS`` leave the run where it ended."""
        stop = type(exc).__name__
        if isinstance(exc, ENDS):
            return Decision(agent.run_id, getattr(exc, "step_id", None) or "", "accept", stop)
        if isinstance(exc, oncelog.ApprovalRequired):
            return self._approval(ledger, agent, exc)
        if isinstance(exc, oncelog.SubjectInDoubt):
            return self._holder_in_doubt(ledger, agent, exc)
        steps = ledger.steps(agent.run_id)
        doubtful = [s for s in steps if s.state in _IN_DOUBT]
        if doubtful:
            return self._in_doubt(ledger, agent, doubtful[-1], stop)
        failed = [s for s in steps if s.state in _NOT_PERFORMED]
        if failed and ledger.get_run(agent.run_id).status is oncelog.RunStatus.FAILED:
            return self._failed(ledger, agent, failed[-1], stop)
        if isinstance(exc, oncelog.NeedsPerson):
            return Decision(agent.run_id, "", "none", stop)  # nothing a person can act on
        return Decision(agent.run_id, "", "unexpected", stop)

    def _choose(self, options: list[str]) -> str:
        return options[next(self.choices, 0) % len(options)]

    def _in_doubt(
        self, ledger: oncelog.Ledger, agent: Agent, step: oncelog.StepRecord, stop: str
    ) -> Decision:
        call = next(c for c in agent.calls if c.step == step.step_id)
        op = op_of(call.item, ref_of(self.schedule, agent, step.step_id))
        performed = self.provider.performed(op)
        # An abandon frees a subject (docs/guarantees.md), for another run to act on: said of
        # an effect the person saw performed, the second effect would be theirs.
        subject = self.schedule.declaration.subject
        done = ["done"] if subject else ["done", "abandon"]
        action = self._choose(done if performed else ["not_done", "abandon"])
        if action == "done":
            result = performed[-1].answer
            ledger.resolve(agent.run_id, step.step_id, "done", by=BY, result=result)
        else:
            ledger.resolve(agent.run_id, step.step_id, action, by=BY)  # type: ignore[arg-type]
        return Decision(agent.run_id, step.step_id, action, stop)

    def _holder_in_doubt(
        self, ledger: oncelog.Ledger, agent: Agent, exc: oncelog.SubjectInDoubt
    ) -> Decision:
        """Decide the holder's step, as the stop's message offers, or wait for the holder's
        own restart to settle it (which never comes if the holder's run has ended: once the
        schedule's choices run out, the person decides)."""
        stop = type(exc).__name__
        holder = next((a for a in self.schedule.agents if a.run_id == exc.held_by_run), None)
        steps = ledger.steps(holder.run_id) if holder is not None else []
        held = [s for s in steps if s.step_id == exc.held_by_step and s.state in _IN_DOUBT]
        if holder is None or not held or self._choose(["decide", "wait"]) == "wait":
            return Decision(agent.run_id, exc.step_id or "", "wait", stop)
        return self._in_doubt(ledger, holder, held[-1], stop)

    def _failed(
        self, ledger: oncelog.Ledger, agent: Agent, step: oncelog.StepRecord, stop: str
    ) -> Decision:
        """An effect the ledger holds as not performed ended the run: retry it, or leave
        it. A person who finds it performed all the same leaves it (an upsert aside, which
        may be made again)."""
        call = next(c for c in agent.calls if c.step == step.step_id)
        op = op_of(call.item, ref_of(self.schedule, agent, call.step))
        performed = self.provider.performed(op)
        may_retry = not performed or self.schedule.declaration.kind == "upsert"
        action = self._choose(["retry", "leave"]) if may_retry else "leave"
        if action == "retry":
            ledger.retry(agent.run_id, step.step_id, by=BY, why="the provider may take it now")
        return Decision(agent.run_id, step.step_id, action, stop)

    def _approval(self, ledger: oncelog.Ledger, agent: Agent, exc: BaseException) -> Decision:
        """Approve (the arguments as asked, or edited) or deny the run's pending request."""
        pending = [a for a in ledger.approvals("pending") if a.run_id == agent.run_id]
        if not pending:
            return Decision(agent.run_id, "", "none", type(exc).__name__)
        request = pending[0]
        action = self._choose(["approve", "edit", "deny"])
        if action == "deny":
            ledger.deny(request.run_id, request.step_id, by=BY, request=request.id)
        elif action == "edit" and (args := ledger.editable_arguments(request)) is not None:
            args["amount"] = args["amount"] - 1
            ledger.approve(request.run_id, request.step_id, by=BY, request=request.id, args=args)
        else:
            action = "approve"
            ledger.approve(request.run_id, request.step_id, by=BY, request=request.id)
        return Decision(request.run_id, request.step_id, action, type(exc).__name__)
