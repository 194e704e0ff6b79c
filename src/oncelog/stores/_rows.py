"""Rows to records and journal entries to text, shared by every SQL store.

Rows are read as plain tuples in the column order below: replaying 10,000 steps decodes
10,000 rows, and lookups by name cost more than the rest of a replayed step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from json.encoder import encode_basestring as quote  # the C escaper json.dumps uses
from typing import Any

from .._exceptions import CorruptRecord, UnserializableValue
from ..records._budgets import Budget
from ..records._records import (
    Approval,
    ApprovalStatus,
    Halt,
    HaltScope,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
    StepType,
)
from ..records._serialization import decode

RUN_COLUMNS = (
    "run_id, status, plan, reason, created_at, updated_at, owner, fencing_token, agent, budget, "
    "input, stopped_by, stop_seq, stop"
)
APPROVAL_COLUMNS = (
    "id, run_id, step_id, tool, args_hash, args, status, requested_at, decided_by, "
    "decided_at, expires_at, note, used_at"
)
HALT_COLUMNS = "id, scope, target, reason, set_by, set_at, cleared_by, cleared_at, note"
# One past the highest recorded position: a seek on the steps primary key, not a column
# every step would have to update.
NEXT_SEQ = "(SELECT COALESCE(MAX(seq) + 1, 0) FROM steps WHERE steps.run_id = runs.run_id)"
STEP_COLUMNS = (
    "run_id, seq, step_id, type, tool, kind, key, args_hash, args, state, result, error, "
    "attempts, tokens_in, tokens_out, started_at, finished_at, first_started_at, retry_at, "
    "reason"
)
# What replay reads of each recorded step: enough to replay a done step, as stored (no
# enum, no record object). Anything else at a position is read again whole, so a state and
# an error are one flag: each text column a row hands to Python costs more than the test.
REPLAY_COLUMNS = "seq, step_id, type, tool, state = 'done' AND error IS NULL, args, result"


def _plan(value: Any) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not all(isinstance(step, str) and step for step in value)
        or len(set(value)) != len(value)
    ):
        raise ValueError(f"the stored plan is not a list of distinct step ids: {value!r}")
    return tuple(value)


def run_record(row: Sequence[Any]) -> RunRecord:
    """A row of ``RUN_COLUMNS`` followed by ``NEXT_SEQ``."""
    run_id, status, plan, reason, created, updated, owner, token, agent, budget = row[:10]
    input_json, stopped_by, stop_seq, stop, next_seq = row[10:15]
    try:
        return RunRecord(
            run_id,
            RunStatus(status),
            None if plan is None else _plan(decode(plan)),
            reason,
            float(created),
            float(updated),
            owner,
            int(token),
            int(next_seq),
            agent,
            None if budget is None else Budget.from_json(budget),
            input_json,
            stopped_by,
            stop_seq,
            stop,
        )
    except (ValueError, TypeError) as exc:
        raise CorruptRecord(f"run row does not decode: {exc}", run_id=run_id) from exc


# Dictionaries, not Enum(value): a lookup by value through the enum machinery costs more
# than the rest of decoding a row.
_TYPES = {t.value: t for t in StepType}
_STATES = {s.value: s for s in StepState}


def step_record(row: Sequence[Any]) -> StepRecord:
    """A row of ``STEP_COLUMNS``."""
    step_type, state = _TYPES.get(row[3]), _STATES.get(row[9])
    if step_type is None or state is None:
        raise CorruptRecord(
            f"step row does not decode: type {row[3]!r}, state {row[9]!r}",
            run_id=row[0], step_id=row[2],
        )  # fmt: skip
    return StepRecord._make((*row[:3], step_type, *row[4:9], state, *row[10:]))


def approval_record(row: Sequence[Any]) -> Approval:
    """A row of ``APPROVAL_COLUMNS``."""
    try:
        status = ApprovalStatus(row[6])
    except ValueError as exc:
        raise CorruptRecord(f"approval {row[0]} does not decode: {exc}", run_id=row[1]) from exc
    id_, run_id, step_id, tool, args_hash, args = row[:6]
    requested, decided_by, decided_at, expires_at, note, used_at = row[7:13]
    return Approval(
        id_, run_id, step_id, tool, args_hash, args, status, requested, decided_by,
        decided_at, expires_at, note, used_at,
    )  # fmt: skip


def halt_record(row: Sequence[Any]) -> Halt:
    """A row of ``HALT_COLUMNS``."""
    try:
        return Halt(row[0], HaltScope(row[1]), *row[2:])
    except ValueError as exc:
        raise CorruptRecord(f"halt {row[0]} does not decode: {exc}") from exc


def journal_json(**fields: str | None) -> str:
    """A journal entry's canonical JSON from values that are already canonical JSON text,
    spliced rather than decoded and encoded again (arguments and results can be large).
    The names are Python identifiers, so they need no escaping."""
    parts = [f'"{k}":{"null" if v is None else v}' for k, v in sorted(fields.items())]
    return "{" + ",".join(parts) + "}"


def leased(owner: str, token: str, ttl: float, origin: str | None) -> str:
    """A ``lease_acquired`` entry: ``origin`` (what started the run) only when known, so
    the entry of a run its own code started is what it always was."""
    if origin is None:
        return journal_json(owner=text(owner), token=token, ttl=number(ttl))
    return journal_json(owner=text(owner), token=token, ttl=number(ttl), origin=text(origin))


def number(value: float) -> str:
    """A float as JSON text that decodes to the same float, for ``journal_json``: its
    ``repr``, as json writes it, without building json's encoder. NaN and the infinities
    are refused (``UnserializableValue``), as the canonical encoder refuses them: JSON has
    no text for them, and an entry holding one would not decode. The boundaries refuse
    them first (``_numbers``); this is the last line, before anything is written."""
    value = float(value)
    if not math.isfinite(value):
        raise UnserializableValue(f"{value!r} is not a number JSON can hold; nothing was written")
    return float.__repr__(value)


def text(value: str | None) -> str:
    """A string as canonical JSON text (non-ASCII kept), for ``journal_json``."""
    return "null" if value is None else quote(value)
