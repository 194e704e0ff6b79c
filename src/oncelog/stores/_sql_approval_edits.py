"""The SQL of a person approving other arguments than a request asked, and the history of
a step's approvals that the runtime reads.

An edit is three journal entries in one transaction: ``approval_edited`` (the request,
who, why, the arguments asked and the arguments approved, by parameter name), then an
``approval_requested`` of a new request holding the edited call (``edited_from`` names the
first) and its ``approval_approved``. The first request becomes ``edited``; the new one is
used by one intent as any approval is, so every check of ``_sql_approvals`` (and
``verify``) holds for it unchanged. The runtime trusts the journal's entries, not the
rows, for what an edit stands for (``approval_history``).

Each function runs inside a transaction its caller opened, holding the run's row lock.
"""

from __future__ import annotations

from typing import Any

from .._exceptions import InvalidPayload
from ..records._argument_edits import checked_edit, edited_payload_json
from ..records._records import Approval, ApprovalEdit, ApprovalHistory
from ..records._serialization import canonical_json, decode, digest
from ._rows import APPROVAL_COLUMNS, approval_record, journal_json, number
from ._rows import text as quoted
from ._sql import NOW, Tx
from ._sql_tx import append


def approval_history(tx: Tx, run_id: str, step_id: str) -> ApprovalHistory:
    """``Store.approval_history``: read from the journal, which no row edit can change."""
    rows = tx.execute(
        "SELECT event, data, at FROM journal WHERE run_id = ? "
        "AND event IN ('approval_requested', 'approval_edited') ORDER BY id",
        (run_id,),
    ).fetchall()
    asked, edits, shapes = False, [], {}
    for event, text, at in rows:
        try:
            data = decode(text)
            if data.get("step_id") != step_id:
                continue
            if event == "approval_requested":
                asked = True
                if data.get("params") is not None:
                    shapes[int(data["request"])] = canonical_json(data["params"])
            else:
                edits.append(_edit(data, float(at)))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # a malformed record stands for nothing; verify reports its broken link
    return ApprovalHistory(asked, tuple(edits), shapes)


def _edit(data: dict[str, Any], at: float) -> ApprovalEdit:
    edited = canonical_json(data["edited_args"])
    if digest(edited_payload_json(decode(edited))) != data["edited_args_hash"]:
        raise ValueError("the edited arguments do not match their hash")
    return ApprovalEdit(
        int(data["request"]), str(data["step_id"]), str(data["args_hash"]),
        canonical_json(data["args"]), int(data["edited_request"]),
        str(data["edited_args_hash"]), edited, str(data["by"]), data.get("note"), at,
    )  # fmt: skip


def approve_edited(
    tx: Tx,
    chosen: Approval,
    edited: Any,
    *,
    by: str,
    note: str | None,
    expires_in: float | None,
) -> Approval:
    """Approve ``edited`` in place of the pending request ``chosen``; return the new,
    approved request."""
    where = {"run_id": chosen.run_id, "step_id": chosen.step_id}
    original, changed = checked_edit(_shape(tx, chosen), chosen.args_json, edited, where)
    args_json = edited_payload_json(changed)
    args_hash = digest(args_json)
    if args_hash == chosen.args_hash:
        raise InvalidPayload(
            "the edited arguments are the ones asked: approve the request without --args",
            **where,
        )
    tx.execute(
        f"UPDATE approvals SET status = 'edited', decided_by = ?, decided_at = {NOW}, note = ? "
        "WHERE id = ? AND status = 'pending'",
        (by, note, chosen.id),
    )
    row = tx.execute(
        "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, status, requested_at, "
        f"decided_by, decided_at, expires_at, note) VALUES (?, ?, ?, ?, ?, 'approved', {NOW}, "
        f"?, {NOW}, {NOW} + CAST(? AS DOUBLE PRECISION), ?) RETURNING {APPROVAL_COLUMNS}",
        (chosen.run_id, chosen.step_id, chosen.tool, args_hash, args_json, by, expires_in, note),
    ).fetchone()
    approved = approval_record(row or ())
    run_id, step = chosen.run_id, quoted(chosen.step_id)
    append(
        tx, run_id, None, "approval_edited",
        journal_json(request=str(chosen.id), step_id=step, args_hash=quoted(chosen.args_hash),
                     args=canonical_json(original), edited_request=str(approved.id),
                     edited_args_hash=quoted(args_hash), edited_args=canonical_json(changed),
                     by=quoted(by), note=quoted(note)),
    )  # fmt: skip
    append(
        tx, run_id, None, "approval_requested",
        journal_json(request=str(approved.id), step_id=step, tool=quoted(chosen.tool),
                     args_hash=quoted(args_hash), args=args_json, superseded="[]",
                     edited_from=str(chosen.id), by=quoted(by)),
    )  # fmt: skip
    append(
        tx, run_id, None, "approval_approved",
        journal_json(request=str(approved.id), step_id=step, args_hash=quoted(args_hash),
                     by=quoted(by), note=quoted(note),
                     expires_in=None if expires_in is None else number(expires_in)),
    )  # fmt: skip
    return approved


def _shape(tx: Tx, request: Approval) -> str | None:
    """The tool's parameters, as the journalled request of ``request`` recorded them."""
    named = f"CAST({tx.dialect.json_text('data', 'request')} AS TEXT)"
    rows = tx.execute(
        "SELECT data FROM journal WHERE run_id = ? AND event = 'approval_requested' "
        f"AND {named} = ?",
        (request.run_id, str(request.id)),
    ).fetchall()
    for (text,) in rows:
        try:
            data = decode(text)
            shape = data.get("params")
            if data.get("args_hash") == request.args_hash and shape is not None:
                return canonical_json(shape)
        except (ValueError, AttributeError):
            continue
    return None
