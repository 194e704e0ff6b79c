"""One ``tools/call`` through the gateway: an effect at a step named by the call, not by
a session or a request id, performed once whatever process takes it.

The step is ``TOOL/CALL_ID`` when the client names its call (``_meta`` or a header), else
``TOOL/args:DIGEST``, the digest the SHA-256 of the arguments' canonical JSON (integral
numbers where the input schema declares an integer): the same call asked again, under any
request id, at any replica, is the same step.

A call whose step is recorded ``done`` with these arguments is answered from the ledger
(that one step read by its id) without taking the run. Any other takes the run's lease
(one process at a time; a call finding it held waits, up to ``lease_wait``, and looks at
the ledger again each time), and enters the run past its settled effects
(``Run.skip_settled``: replaying a done, failed or abandoned effect would only hand back
what is recorded), so that its cost does not grow with the run. From the first step that
is not settled (one in doubt, not done, or held by the run's stop), it walks the recorded
steps in their order, so that each position is asked for as it was recorded: a step in
doubt goes through the engine's recovery, and the call's own step is asked at its
recorded position, or at the next one. The run is then left open for the next call
(``SessionEnded``), or stopped with the reason a person must see (an approval, a halt, an
effect in doubt).

Nothing here imports MCP: ``forward`` calls the upstream server (in the event loop); it
runs in a worker thread, as the run's store calls do.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog import (
    Ledger,
    Run,
    RunLeased,
    RunStopped,
    StepState,
    StepType,
    UsageError,
    canonical_json,
)

from ._common import Policy
from ._mcp_subjects import as_declared
from ._proxy_runs import SessionEnded

Forward = Callable[[str, Any, str], Any]  # (tool, arguments, key) -> the upstream's result
PolicyOf = Callable[[str, str], Policy]  # (tool, recorded kind) -> its policy now

LEASE_POLL = 0.1  # seconds between looks at a run another call holds
MAX_CALL_ID_CHARS = 200


@dataclass(frozen=True)
class Asked:
    run_id: str
    step_id: str
    tool: str
    arguments: dict[str, Any]
    digest: str  # SHA-256 of the canonical arguments
    policy: Policy


def digest_of(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None) -> str:
    """The arguments' SHA-256, over their canonical JSON with each field an input schema
    declares a number as its one spelling (``42.0`` for an integer is ``42``)."""
    made = as_declared(arguments, schema)
    return hashlib.sha256(canonical_json(made, what="arguments").encode()).hexdigest()


def step_of(tool: str, call_id: str | None, digest: str) -> str:
    """The step of a call: named by the client, else by its tool and arguments."""
    if call_id is None:
        return f"{tool}/args:{digest[:32]}"
    if not call_id or len(call_id) > MAX_CALL_ID_CHARS or not call_id.isprintable():
        raise UsageError(
            f"a call id is 1 to {MAX_CALL_ID_CHARS} printable characters, not {call_id[:40]!r}"
        )
    return f"{tool}/{call_id}"


def recorded(ledger: Ledger, asked: Asked) -> tuple[bool, Any]:
    """``(True, result)`` when the call's step is done with these arguments."""
    step = ledger.step(asked.run_id, asked.step_id)
    if step is None or step.state is not StepState.DONE or step.result_json is None:
        return False, None
    if step.tool != asked.tool or _arguments(step.args_json) != asked.arguments:
        return False, None
    return True, json.loads(step.result_json)


def perform(
    ledger: Ledger, asked: Asked, forward: Forward, policy_of: PolicyOf, agent: str | None,
    wait: float,
) -> Any:  # fmt: skip
    """The call's result, recorded or performed once; an oncelog error when it cannot be
    given (the run stopped for a person, the run held past ``wait``)."""
    found, result = recorded(ledger, asked)
    if found:
        return result
    deadline = time.monotonic() + wait
    while True:
        context = ledger.run(asked.run_id, agent=agent, origin="gateway")
        try:
            run = context.__enter__()
        except RunLeased:
            if time.monotonic() > deadline:
                raise
            time.sleep(LEASE_POLL)
            found, result = recorded(ledger, asked)
            if found:
                return result
            continue
        break
    try:
        result = _in_run(ledger, run, asked, forward, policy_of)
    except RunStopped as exc:
        context.__exit__(type(exc), exc, None)
        raise
    except BaseException:
        _leave(context)
        raise
    _leave(context)
    return result


def _leave(context: Any) -> None:
    ended = SessionEnded("the gateway's call ended; the run stays open for the next")
    context.__exit__(SessionEnded, ended, None)


def _in_run(ledger: Ledger, run: Run, asked: Asked, forward: Forward, policy_of: PolicyOf) -> Any:
    # Read again under the lease: another replica may have recorded the step meanwhile.
    mine = ledger.step(asked.run_id, asked.step_id)
    end = run.record.next_seq if mine is None else mine.seq
    start = run.skip_settled(end)
    for step in ledger.steps(asked.run_id, start=start) if start < end else ():
        if step.seq >= end:
            break
        if step.type is not StepType.EFFECT:
            raise UsageError(
                f"run {asked.run_id!r} holds a {step.type.value} step {step.step_id!r}: the "
                "gateway walks runs of its own calls only; give its clients other run ids"
            )
        earlier = policy_of(step.tool, step.kind).tool(step.tool, _performer(step.tool, forward))
        try:
            run.effect(step.step_id, earlier, _arguments(step.args_json))
        except RunStopped:
            raise
        except Exception:  # refused or failed before, and recorded as such
            continue
    effect = asked.policy.tool(asked.tool, _performer(asked.tool, forward))
    return run.effect(asked.step_id, effect, asked.arguments)


def _performer(tool: str, forward: Forward) -> Callable[..., Any]:
    def call(arguments: Any, *, idempotency_key: str) -> Any:
        return forward(tool, arguments, idempotency_key)

    return call


def _arguments(args_json: str) -> Any:
    """A gateway step's arguments as recorded: its one positional argument, or, where a
    person approved edited arguments (``approve --args``), its ``arguments`` by name."""
    decoded = json.loads(args_json)
    if not isinstance(decoded, dict):
        return decoded
    positional, named = decoded.get("args"), decoded.get("kwargs")
    if isinstance(positional, list) and len(positional) == 1:
        return positional[0]
    if positional == [] and isinstance(named, dict) and set(named) == {"arguments"}:
        return named["arguments"]
    return decoded
