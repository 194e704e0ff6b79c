"""The SQL of approvals. A request is bound to a run, a step and the exact arguments; a
person decides one named request; one intent uses one approval.

The approvals table is what the runtime reads, so it is not trusted alone: an approval
lets an effect run only if the journal (append-only, hash-chained) holds the decision of
that very request, for those arguments, by the person the row names, still unexpired,
and no intent has used it yet. A row set to ``approved``, inserted, copied to other
arguments or set back from ``used`` behind the journal's back lets nothing run; nor is a
pending row the journal has no request of ever put to a person as the agent's question.

Each function runs inside a transaction its caller opened, holding the run's row lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._exceptions import ApprovalRequired, CorruptRecord, UnknownApproval
from ..records._records import Approval, ApprovalStatus
from ..records._serialization import decode, digest
from ..records._value import replace
from . import _sql_names as names
from ._protocol import Lease, NewStep
from ._rows import APPROVAL_COLUMNS, approval_record, journal_json, number
from ._rows import text as quoted
from ._sql import NOW, Tx, in_list
from ._sql_approval_edits import approve_edited
from ._sql_refusals import utc
from ._sql_tx import append, lock_run


def request_approval(tx: Tx, lease: Lease, step: NewStep, shape: str | None) -> Approval:
    """``Store.request_approval``, in the caller's transaction (which has fenced)."""
    lapsed = f"expires_at <= {NOW}"
    params: tuple[Any, ...] = (lease.run_id, step.step_id)
    if step.approval_lasts is not None:
        # The tool's bound: a decision older than that authorises nothing (store's clock).
        lapsed = f"({lapsed} OR decided_at <= {NOW} - CAST(? AS DOUBLE PRECISION))"
        params += (step.approval_lasts,)
    expired = [
        int(r[0])
        for r in tx.execute(
            "UPDATE approvals SET status = 'expired' WHERE run_id = ? AND step_id = ? "
            f"AND status = 'approved' AND {lapsed} RETURNING id",
            params,
        ).fetchall()
    ]
    rows = tx.execute(
        f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = ? AND step_id = ? "
        "AND args_hash = ? AND status IN ('pending', 'approved', 'denied') ORDER BY id DESC",
        (lease.run_id, step.step_id, step.args_hash),
    ).fetchall()
    for row in rows:
        live = approval_record(row)
        # A row the journal does not back is passed over, so the step asks anew instead
        # of waiting for ever on a row that can never be used or decided.
        if live.status is ApprovalStatus.APPROVED:
            if _unusable(tx, live, step.seq) is None:
                return live
        elif live.status is ApprovalStatus.DENIED:
            return _journalled_denial(tx, live)
        elif _asked(tx, live):
            return live
    others = [
        r[0]
        for r in tx.execute(
            "SELECT id FROM approvals WHERE run_id = ? AND step_id = ? AND status = 'pending' "
            "AND args_hash != ? ORDER BY id",
            (lease.run_id, step.step_id, step.args_hash),
        ).fetchall()
    ]
    if others:
        tx.execute(
            f"UPDATE approvals SET status = 'superseded' WHERE id IN {in_list(others)}", others
        )
    row = tx.execute(
        "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, status, requested_at) "
        f"VALUES (?, ?, ?, ?, ?, 'pending', {NOW}) RETURNING {APPROVAL_COLUMNS}",
        (lease.run_id, step.step_id, step.tool, step.args_hash, step.args_json),
    ).fetchone()
    asked = approval_record(row or ())
    append(
        tx, lease.run_id, step.seq, "approval_requested",
        journal_json(request=str(asked.id), step_id=quoted(step.step_id),
                     tool=quoted(step.tool), args_hash=quoted(step.args_hash), args=step.args_json,
                     superseded="[" + ",".join(str(i) for i in others) + "]",
                     **_given(expired="[" + ",".join(map(str, expired)) + "]" if expired else None,
                              params=shape)),
    )  # fmt: skip
    return asked


def _given(**fields: str | None) -> dict[str, str]:
    """The fields that hold something: a request with none of them reads as before."""
    return {k: v for k, v in fields.items() if v is not None}


def use_approval(tx: Tx, lease: Lease, step: NewStep) -> int:
    """Use up the approval of exactly these arguments in the intent's transaction, so one
    approval lets one attempt run, whatever is killed when; its id goes in the intent."""
    fresh, params = "", (lease.run_id, step.step_id, step.args_hash)
    if step.approval_lasts is not None:
        # The tool's bound on a decision's age, by the store's clock.
        fresh = f" AND decided_at > {NOW} - CAST({step.approval_lasts!r} AS DOUBLE PRECISION)"
    rows = tx.execute(
        f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = ? AND step_id = ? "
        f"AND args_hash = ? AND status = 'approved' AND (expires_at IS NULL OR expires_at > "
        f"{NOW}){fresh} ORDER BY id{tx.dialect.for_update}",
        params,
    ).fetchall()
    refused = []
    for row in rows:
        approval = approval_record(row)
        why = _unusable(tx, approval, step.seq)
        if why is None:
            tx.execute(
                f"UPDATE approvals SET status = 'used', used_at = {NOW} WHERE id = ?",
                (approval.id,),
            )
            return approval.id
        refused.append(f"approval {approval.id} does not count: {why}")
    raise ApprovalRequired(
        "; ".join(refused) or "the approval of this effect is gone (used, expired or withdrawn)",
        run_id=lease.run_id, step_id=step.step_id, key=step.key,
    )  # fmt: skip


def _unusable(tx: Tx, approval: Approval, seq: int) -> str | None:
    """Why the journal does not let ``approval`` be used, or None if it does: a decision
    that approves it, found through the run's approval decisions (``journal_approvals``),
    and no intent of its step (at ``seq``), or ``recorded`` entry, that used it, looked
    for among the records written after the request's first decision (none can use it
    before that)."""
    if approval.decided_by is None:
        return "nobody is named as approving it"
    field = tx.dialect.json_text
    found = tx.execute(
        f"SELECT id, data, at, {NOW} FROM journal WHERE run_id = ? "
        f"AND event = 'approval_approved' AND CAST({field('data', 'request')} AS TEXT) = ? "
        "ORDER BY id",
        (approval.run_id, str(approval.id)),
    ).fetchall()
    backing = next((row[0] for row in found if _backs(approval, row[1:])), None)
    if backing is None:
        return (
            f"the journal holds no unexpired decision by {approval.decided_by} approving "
            "this request for these arguments"
        )
    used = tx.execute(
        "SELECT 1 FROM journal WHERE run_id = ? AND id > ? AND seq = ? "
        "AND event IN ('intent', 'recorded') "
        f"AND CAST({field('data', 'approval')} AS TEXT) = ? LIMIT 1",
        (approval.run_id, found[0][0], seq, str(approval.id)),
    ).fetchone()
    return "an intent already used it" if used is not None else None


def _backs(approval: Approval, row: Sequence[Any]) -> bool:
    """Does the journalled decision ``row`` (data, at, now) approve ``approval`` as is?"""
    try:
        data, at, now = decode(row[0]), float(row[1]), float(row[2])
        lasts = data.get("expires_in")
        return bool(
            data.get("step_id") == approval.step_id
            and data.get("args_hash") == approval.args_hash
            and data.get("by") == approval.decided_by
            and (lasts is None or at + float(lasts) > now)
        )
    except (ValueError, TypeError, AttributeError):
        return False  # a malformed record backs nothing; verify reports its broken link


def _journalled_denial(tx: Tx, denial: Approval) -> Approval:
    """``denial`` as the journal holds it: the note the agent receives is the one the
    person's journalled decision of this request carries, never the row's. A row the
    journal holds no such denial of (by the person it names, for these arguments) keeps
    stopping the effect, but names nobody and says nothing (``decided_by`` None). A
    decision journalled before requests were named matches by step and person."""
    named = f"CAST({tx.dialect.json_text('data', 'request')} AS TEXT)"
    rows = tx.execute(
        "SELECT data FROM journal WHERE run_id = ? AND event = 'approval_denied' "
        f"AND ({named} = ? OR {named} IS NULL) ORDER BY id DESC",
        (denial.run_id, str(denial.id)),
    ).fetchall()
    for (text,) in rows:
        try:
            data = decode(text)
            if (data.get("step_id"), data.get("by")) == (denial.step_id, denial.decided_by) and (
                "request" not in data or data.get("args_hash") == denial.args_hash
            ):
                return replace(denial, note=data.get("note"))
        except (ValueError, AttributeError):
            continue  # a malformed record decides nothing; verify reports its broken link
    return replace(denial, decided_by=None, note=None)


def decide_approval(
    tx: Tx,
    run_id: str,
    step_id: str,
    status: ApprovalStatus,
    *,
    by: str,
    expires_in: float | None,
    note: str | None,
    request: int | None,
    args_hash: str | None,
    edited: Any = None,
) -> Approval:
    """``Store.decide_approval`` but the run's queueing. Naming neither ``request`` nor
    ``args_hash`` is allowed only while the step was never asked with other arguments, so
    the decision is always about the arguments the person read."""
    if not lock_run(tx, run_id):
        # UnknownApproval all the same (what was asked for is not there), saying why.
        raise UnknownApproval(
            f"no run named {run_id!r}, so no approval is pending for it"
            f"{names.did_you_mean(run_id, names.run_ids(tx))}",
            run_id=run_id, step_id=step_id,
        )  # fmt: skip
    chosen = _chosen(tx, run_id, step_id, request, args_hash)
    if edited is not None and status is ApprovalStatus.APPROVED:
        return approve_edited(tx, chosen, edited, by=by, note=note, expires_in=expires_in)
    decided = tx.execute(
        f"UPDATE approvals SET status = ?, decided_by = ?, decided_at = {NOW}, "
        f"expires_at = {NOW} + CAST(? AS DOUBLE PRECISION), note = ? WHERE id = ? "
        f"AND status = 'pending' RETURNING {APPROVAL_COLUMNS}",
        (status.value, by, expires_in, note, chosen.id),
    ).fetchone()
    append(
        tx, run_id, None, f"approval_{status.value}",
        journal_json(request=str(chosen.id), step_id=quoted(step_id),
                     args_hash=quoted(chosen.args_hash), by=quoted(by), note=quoted(note),
                     expires_in=None if expires_in is None else number(expires_in)),
    )  # fmt: skip
    return approval_record(decided or ())


def _chosen(
    tx: Tx, run_id: str, step_id: str, request: int | None, args_hash: str | None
) -> Approval:
    """The pending request a person named, or ``UnknownApproval`` saying why there is
    none to decide."""
    asked = [
        approval_record(r)
        for r in tx.execute(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = ? AND step_id = ? "
            "ORDER BY id",
            (run_id, step_id),
        ).fetchall()
    ]
    where = {"run_id": run_id, "step_id": step_id}
    if request is None and args_hash is None and len({a.args_hash for a in asked}) > 1:
        raise UnknownApproval(
            f"step {step_id!r} was asked with {len({a.args_hash for a in asked})} different "
            "arguments: name the request you read (its id or arguments hash, as "
            "`oncelog approvals` shows them)",
            **where,
        )
    named = [
        a for a in asked
        if (request is None or a.id == request) and (args_hash is None or a.args_hash == args_hash)
    ]  # fmt: skip
    pending = [a for a in named if a.status is ApprovalStatus.PENDING]
    if pending:
        return _as_shown(tx, pending[-1])
    if not named:
        raise UnknownApproval(
            _no_such(step_id, request, args_hash) + _elsewhere(tx, request, run_id, step_id),
            **where,
        )
    last = named[-1]
    if last.status is ApprovalStatus.SUPERSEDED:
        newer = [a.id for a in asked if a.status is ApprovalStatus.PENDING]
        raise UnknownApproval(
            f"request {last.id} was superseded: the agent asked step {step_id!r} again with "
            f"other arguments{f' (request {newer[-1]})' if newer else ''}; read those and "
            "decide that request",
            **where,
        )
    decided = (
        ""
        if last.decided_by is None
        else f" (decided by {last.decided_by} at {utc(last.decided_at)})"
    )
    raise UnknownApproval(
        f"request {last.id} of step {step_id!r} is {last.status.value}{decided}, not pending"
        + (
            ": the step asks a fresh request when it runs again"
            if last.status is ApprovalStatus.EXPIRED
            else ""
        ),
        **where,
    )


def _as_shown(tx: Tx, request: Approval) -> Approval:
    """``request``, if the arguments a person reads are the ones its hash binds (a
    decision binds the hash, so arguments edited alone would show one thing and approve
    another) and the agent asked it (a row inserted by hand is no agent's question)."""
    if digest(request.args_json) != request.args_hash:
        raise CorruptRecord(
            f"the arguments of request {request.id} do not match its arguments hash: the "
            "row was edited, and what it shows is not what it would approve",
            run_id=request.run_id, step_id=request.step_id,
        )  # fmt: skip
    if not _asked(tx, request):
        raise CorruptRecord(
            f"request {request.id} of step {request.step_id!r} is not in the journal: no "
            "agent asked it, the row was added behind the ledger's back; it is not decided",
            run_id=request.run_id, step_id=request.step_id,
        )  # fmt: skip
    return request


def _asked(tx: Tx, request: Approval) -> bool:
    """Does the journal hold the ``approval_requested`` record of ``request``: its id,
    step and arguments hash (a record written before requests were named matches by step
    and arguments hash)? Read on a person's decision and when a step would wait on a
    pending row, never on a step's usual path."""
    named = f"CAST({tx.dialect.json_text('data', 'request')} AS TEXT)"
    rows = tx.execute(
        "SELECT data FROM journal WHERE run_id = ? AND event = 'approval_requested' "
        f"AND ({named} = ? OR {named} IS NULL)",
        (request.run_id, str(request.id)),
    ).fetchall()
    for (text,) in rows:
        try:
            data = decode(text)
            if (data.get("step_id"), data.get("args_hash")) == (request.step_id, request.args_hash):
                return True
        except (ValueError, AttributeError):
            continue  # a malformed record asks nothing; verify reports its broken link
    return False


def _elsewhere(tx: Tx, request: int | None, run_id: str, step_id: str) -> str:
    """Where the request a person named belongs, when it is another step's: they read it
    on the wrong row, or typed the wrong run; naming none, the run's steps that wait."""
    if request is None:
        return _asked_in_run(tx, run_id, step_id)
    row = tx.execute("SELECT run_id, step_id FROM approvals WHERE id = ?", (request,)).fetchone()
    if row is None or (row[0], row[1]) == (run_id, step_id):
        return ""
    return f"; request {request} belongs to run {row[0]!r}, step {row[1]!r}"


def _asked_in_run(tx: Tx, run_id: str, step_id: str) -> str:
    """The steps of the run that have a pending request, nearest the one named first."""
    rows = tx.execute(
        "SELECT DISTINCT step_id FROM approvals WHERE run_id = ? AND status = 'pending'",
        (run_id,),
    ).fetchall()
    pending = [str(row[0]) for row in rows if row[0] != step_id]
    if not pending:
        return ""
    near = names.nearest(step_id, pending) or sorted(pending)[:3]
    return f"; pending in run {run_id!r}: step {', '.join(repr(p) for p in near)}"


def _no_such(step_id: str, request: int | None, args_hash: str | None) -> str:
    if request is None and args_hash is None:
        return f"no approval is pending for step {step_id!r}: it never asked for one"
    named = " and ".join(
        part
        for part in (
            None if request is None else f"id {request}",
            None if args_hash is None else f"arguments hash {args_hash}",
        )
        if part
    )
    return f"step {step_id!r} has no approval request with {named}"
