"""A Strands turn's interrupts as oncelog approvals: the interrupt the guard raises for an
approval request, an answer recorded as the decision on exactly that request's arguments,
and the conversation set back to the turn's start, where an answered turn replays from."""

from __future__ import annotations

import copy
import json
import weakref
from typing import Any

# Imported by oncelog.integrations.strands only, once strands imported there.
from strands import Agent
from strands.interrupt import Interrupt
from strands.types.agent import AgentInput
from strands.types.content import Messages

from oncelog import ApprovalRequired, Ledger, UsageError

APPROVAL = "oncelog-approval"  # the name of the interrupts the guard raises
_BY = "strands-interrupt"  # who decided, when an answer does not say


def ask(
    ledger: Ledger, run_id: str, step: str, tool: str, arguments: Any, waits: ApprovalRequired
) -> Interrupt:
    """The Strands interrupt for the step's pending approval request: its id names the
    request and the hash of its arguments, so an answer is the decision on exactly the
    arguments the person was shown, and on nothing else."""
    pending = [a for a in ledger.approvals() if (a.run_id, a.step_id) == (run_id, step)]
    request, args_hash = (pending[0].id, pending[0].args_hash) if pending else (None, None)
    reason = {"run_id": run_id, "step_id": step, "tool": tool, "arguments": arguments,
              "request": request, "message": waits.message}  # fmt: skip
    ident = json.dumps(["oncelog", run_id, step, request, args_hash])
    return Interrupt(id=ident, name=APPROVAL, reason=reason)


def _decision(response: Any) -> tuple[bool, str, str | None]:
    """An interrupt's answer as (approved, by, note): ``True``/``"y"``/``"yes"``, or
    ``{"approve": bool, "by": NAME, "note": TEXT}``; anything else denies."""
    if isinstance(response, dict):
        by = str(response.get("by") or _BY)
        note = response.get("note")
        return response.get("approve") is True, by, None if note is None else str(note)
    approved = response is True or str(response).strip().lower() in ("y", "yes", "approve")
    return approved, _BY, None


# Per agent, the conversation before its turn in progress and the turn's prompt: where an
# answered turn replays from (Strands' conversation manager may have trimmed the prompt).
_starts: weakref.WeakKeyDictionary[Agent, tuple[Messages, AgentInput]]
_starts = weakref.WeakKeyDictionary()


def answered(ledger: Ledger, agent: Agent, prompt: AgentInput) -> tuple[Any, dict[str, Any]]:
    """Answers to a turn's interrupts: the guard's are recorded as oncelog decisions, on
    the request and arguments hash their id names; the others are kept for the replay.
    The conversation is set back to the turn's prompt, which the turn replays from: its
    recorded steps come back, and the interrupted one runs with its answer."""
    state = agent._interrupt_state
    state.resume(prompt)  # Strands' own checks: only answers, each to a known interrupt
    kept: dict[str, Interrupt] = {}
    for ident, interrupt in state.interrupts.items():
        if interrupt.response is None:
            continue
        if interrupt.name != APPROVAL:
            kept[ident] = interrupt
            continue
        _, run_id, step, request, args_hash = json.loads(ident)
        approved, by, note = _decision(interrupt.response)
        decide = ledger.approve if approved else ledger.deny
        decide(run_id, step, by=by, request=request, args_hash=args_hash, note=note)
    if agent not in _starts:
        raise UsageError(
            "answer a turn's interrupts with the agent object whose guard.invoke raised "
            "them; in a new process, invoke the turn's prompt again: it asks again"
        )
    return set_back(agent), kept


def remember_start(agent: Agent, prompt: AgentInput) -> None:
    """Keep the conversation before a new turn, and its prompt."""
    _starts[agent] = (copy.deepcopy(agent.messages), copy.deepcopy(prompt))


def set_back(agent: Agent) -> AgentInput:
    """The agent's conversation as before its turn in progress, out of any interrupt
    state; the turn's prompt, which replays it."""
    messages, prompt = _starts[agent]
    agent.messages[:] = copy.deepcopy(messages)
    agent._interrupt_state.deactivate()
    return prompt
