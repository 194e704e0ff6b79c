"""Decisions every SQL store makes the same way, on rows it has read in its own dialect."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from json.encoder import encode_basestring as quote  # the C escaper json.dumps uses
from typing import Any

from .._exceptions import CorruptRecord, DuplicateStep, LeaseLost, PlanMismatch
from ..records._budgets import AgentBudget, Budget, BudgetAlert, Usage, check, refusal
from ..records._chain import checkpoint_payload
from ..records._records import Checkpoint, JournalEntry, Resolution, RunRecord
from ..records._serialization import decode, encode
from ..records._value import as_dict
from ._protocol import Lease, NewStep, Outcome
from ._rows import journal_json, number, text


def lease_needs_extending(row: Sequence[Any] | None, lease: Lease) -> bool:
    """Given the run's ``owner, fencing_token, seconds left on the lease``, refuse a stale
    owner with ``LeaseLost``; say whether half of the lease is used up."""
    if row is None or row[0] != lease.owner or row[1] != lease.token:
        raise LeaseLost(
            "another worker took this run over; this worker may not write to it",
            run_id=lease.run_id,
        )
    return row[2] is None or row[2] < lease.ttl / 2


def step_changed(lease: Lease) -> LeaseLost:
    """What an outcome that matched no step in flight means, once the fence held."""
    return LeaseLost(
        "the step was resolved or retried by someone else while this worker ran it",
        run_id=lease.run_id,
    )


def duplicate_step(lease: Lease, step: NewStep) -> DuplicateStep:
    """What a unique-constraint violation on a new step's insert means."""
    return DuplicateStep(
        f"step id {step.step_id!r} is already recorded at another position "
        f"(asked at position {step.seq}): step ids must be unique in a run",
        run_id=lease.run_id, step_id=step.step_id, key=step.key,
    )  # fmt: skip


def intent_json(
    lease: Lease, step: NewStep, attempt: int, reason: str | None, approval: int | None = None
) -> str:
    """The journal entry of an intent, naming the approval it used, if any (so the
    journal shows that approval used, whatever its row says later). Written once per live
    step: ``journal_json``'s text, its fields spliced in their sorted order by hand."""
    used = "" if approval is None else f'"approval":{approval!s},'
    subject = "" if step.subject is None else f'"subject":{quote(step.subject)},'
    if step.subject_for is not None:
        subject += f'"subject_for":{number(step.subject_for)},'
    # An enum member is quoted as its str base holds its value (``.value`` is a Python call).
    return (
        f'{{{used}"args":{step.args_json},"args_hash":{quote(step.args_hash)},'
        f'"attempt":{attempt!s},"cost":{number(step.cost)},'
        f'"irreversible":{"true" if step.irreversible else "false"},"key":{quote(step.key)},'
        f'"kind":{quote(step.kind)},"reason":{"null" if reason is None else quote(reason)},'
        f'"step_id":{quote(step.step_id)},{subject}'
        f'"token":{lease.token!s},"tool":{quote(step.tool)},"type":{quote(step.type)}}}'
    )


def outcome_json(outcome: Outcome, attempt: int) -> str:
    """The journal entry of an outcome (or of a probe's answer); a retry's time only when
    a retry policy set one. Spliced as ``intent_json`` is."""
    cost = "null" if outcome.cost is None else number(outcome.cost)
    retry = "" if outcome.retry_at is None else f',"retry_at":{number(outcome.retry_at)}'
    result, error = outcome.result_json, outcome.error_json
    return (
        f'{{"attempt":{attempt!s},"cost":{cost},"error":{"null" if error is None else error},'
        f'"result":{"null" if result is None else result}{retry},'
        f'"state":{quote(outcome.state)},"tokens_in":{outcome.tokens_in!s},'
        f'"tokens_out":{outcome.tokens_out!s}}}'
    )


def recorded_json(
    lease: Lease, step: NewStep, attempt: int, outcome: Outcome, approval: int | None = None
) -> str:
    """The journal entry of a step recorded after it ran (a model call, a read): the
    fields of its intent and of its outcome in one record, as no moment lay between the
    two. ``cost`` is what the intent reserved, ``settled_cost`` the outcome's own
    (``cost`` in an outcome); ``elapsed_us`` the microseconds the call took, so that it
    finished that long after the record's time (its start): an integer, as a float's
    shortest text costs several thousand instructions to find. Spliced as
    ``intent_json`` is."""
    used = "" if approval is None else f'"approval":{approval!s},'
    settled = "null" if outcome.cost is None else number(outcome.cost)
    retry = "" if outcome.retry_at is None else f',"retry_at":{number(outcome.retry_at)}'
    result, error = outcome.result_json, outcome.error_json
    return (
        f'{{{used}"args":{step.args_json},"args_hash":{quote(step.args_hash)},'
        f'"attempt":{attempt!s},"cost":{number(step.cost)},'
        f'"elapsed_us":{round(step.elapsed * 1e6)!s},"error":{"null" if error is None else error},'
        f'"irreversible":{"true" if step.irreversible else "false"},"key":{quote(step.key)},'
        f'"kind":{quote(step.kind)},"reason":null,'
        f'"result":{"null" if result is None else result}{retry},'
        f'"settled_cost":{settled},"state":{quote(outcome.state)},'
        f'"step_id":{quote(step.step_id)},"token":{lease.token!s},'
        f'"tokens_in":{outcome.tokens_in!s},"tokens_out":{outcome.tokens_out!s},'
        f'"tool":{quote(step.tool)},"type":{quote(step.type)}}}'
    )


JOURNAL_COLUMNS = "id, run_id, seq, event, data, at, hash"
CHECKPOINT_COLUMNS = "id, run_id, entries, head, at, key_id, signature"


def checkpoint_record(row: Sequence[Any]) -> Checkpoint:
    ident, run_id, entries, head, at, key, signature = row
    return Checkpoint(int(ident), run_id, int(entries), head, float(at), key, signature)


def new_checkpoint(
    run_id: str,
    head_row: Sequence[Any] | None,
    last: Sequence[Any] | None,
    sign: Callable[[str], str],
) -> tuple[int, str, float, str] | None:
    """(entries, head, at, signature) for a new checkpoint of the chain ``head_row``
    (count, head, clock), or None if it is empty or ``last`` (the run's latest
    checkpoint's entries and head) already covers it."""
    if head_row is None or not head_row[0]:
        return None
    entries, head, at = int(head_row[0]), str(head_row[1]), float(head_row[2])
    if last is not None and (int(last[0]), last[1]) == (entries, head):
        return None
    return entries, head, at, sign(checkpoint_payload(run_id, entries, head, at))


def journal_entry(row: Sequence[Any]) -> JournalEntry:
    """A row of ``JOURNAL_COLUMNS``."""
    entry_id, run_id, seq, event, data, at, chained = row
    try:
        decoded = decode(data)
    except ValueError as exc:
        raise CorruptRecord(f"journal entry {entry_id} does not decode", run_id=run_id) from exc
    return JournalEntry(entry_id, run_id, seq, event, decoded, at, data, chained)


def plan_replaced_json(current: RunRecord, plan_json: str | None, replace: bool) -> str:
    """The journal entry of replacing a run's stored plan; ``PlanMismatch`` unless the
    run had none or the caller asked to replace it."""
    old = None if current.plan is None else list(current.plan)
    if current.plan is not None and not replace:
        raise PlanMismatch(
            f"run has plan {old}, asked for {decode(plan_json or 'null')}; "
            "pass replace_plan=True to replace it",
            run_id=current.run_id,
        )
    old_json = None if old is None else encode(old, what="plan", limit=1 << 24)
    return journal_json(old=old_json, new=plan_json)


def resolved_json(
    resolution: Resolution,
    by: str,
    note: str | None,
    result_json: str | None,
    forced: str | None,
    attempt: int | None = None,
) -> str:
    """The journal entry of a person's decision. ``no_result`` marks ``done`` without the
    provider's answer (the agent gets ``oncelog.NO_RESULT``), as ``result`` null cannot
    tell it from a recorded None; ``forced`` names the live owner a forced decision
    overrode; ``attempt`` the attempt the person decided on, as they named it. Each is
    there only when it applies."""
    fields: dict[str, str | None] = {
        "resolution": text(resolution.value), "by": text(by), "note": text(note),
        "result": result_json,
    }  # fmt: skip
    if resolution is Resolution.DONE and result_json is None:
        fields["no_result"] = "true"
    if forced is not None:
        fields["forced"] = text(forced)
    if attempt is not None:
        fields["attempt"] = str(attempt)
    return journal_json(**fields)


# -- budgets: the arithmetic of a check, on totals each store sums in its own SQL --------


def run_usage(
    budget_json: str | None, age: float, totals: Sequence[Any]
) -> tuple[Budget | None, Usage]:
    """The run's budget and usage from its stored limits, its age in seconds by the
    store's clock, and ``steps, tokens, cost, irreversible`` summed over its steps."""
    steps, tokens, cost, irreversible = totals
    budget = None if budget_json is None else Budget.from_json(budget_json)
    return budget, Usage(steps, tokens, cost, age, irreversible)


def check_run_budget(
    budget: Budget, used: Usage, run_id: str, step: NewStep, *, new: bool
) -> list[BudgetAlert]:
    """Refuse the step if, with it, the run would be over a limit; return the limits past
    their warning threshold. Cost is reserved per attempt (a retry may be charged again
    by the provider); a retry is not a new step or a new irreversible action. A model
    call's tokens are known only after it, so a run goes on until its tokens are over the
    limit, then stops."""
    used = Usage(used.steps + new, used.tokens, used.cost + step.cost, used.wall_clock,
                 used.irreversible + int(step.irreversible and new))  # fmt: skip
    over, warnings = check(
        budget, as_dict(used), scope="run", target=run_id, run_id=run_id, step_id=step.step_id
    )
    if over is not None:
        raise refusal(over, step.key)
    return warnings


def check_agent_budget(
    budget: AgentBudget, totals: Sequence[Any], lease: Lease, step: NewStep, *, new: bool
) -> list[BudgetAlert]:
    """The same for an agent's daily budget, given ``calls, cost, irreversible`` summed
    over today's effects of all its runs."""
    calls, cost, irreversible = totals
    used = {"calls": calls + new, "cost": cost + step.cost,
            "irreversible": irreversible + int(step.irreversible and new)}  # fmt: skip
    over, warnings = check(
        budget, used, scope="agent", target=lease.agent or "", run_id=lease.run_id,
        step_id=step.step_id,
    )  # fmt: skip
    if over is not None:
        raise refusal(over, step.key)
    return warnings
