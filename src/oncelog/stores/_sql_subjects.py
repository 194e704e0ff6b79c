"""Subjects: the claim an effect's intent takes on what it acts on, one row per subject in
the ledger's ``subjects`` table, shared by every run and agent of the ledger.

A claim row names its holder, a step of some run; the holder's state is that step's own
(no copy to keep in step): a person's ``not_done`` or ``abandon``, or a refusal, frees the
subject in the transaction that writes that state. A done claim with an expiry
(``once_for``) is free once it has passed, by the store's clock; a claim in doubt never
expires. The claim row is locked after the run's row and the agent's budget row and
before the journal (lock 3a in ``_sql_tx``): an intent takes one subject, so two intents
cannot wait on each other's claims.
"""

from __future__ import annotations

from typing import Any

from ..records._records import StepState, SubjectClaim
from ._protocol import Lease, NewStep, SubjectHeld
from ._sql import NOW, Tx

_FREE = ("not_done", "abandoned", "failed")
_HOLDER = (
    "SELECT c.subject, c.run_id, c.seq, c.step_id, s.state, "
    f"COALESCE(r.lease_expires_at >= {NOW}, FALSE), c.claimed_at, s.args_hash, s.result, "
    f"s.error, c.expires_at IS NOT NULL AND c.expires_at <= {NOW}, c.expires_at "
    "FROM subjects c JOIN steps s ON s.run_id = c.run_id AND s.seq = c.seq "
    "JOIN runs r ON r.run_id = c.run_id"
)


def claim(tx: Tx, lease: Lease, step: NewStep) -> None:
    """Make the step the holder of its subject, or raise ``SubjectHeld`` naming the step
    that holds it (done, or not settled), under its text or an older spelling of it."""
    subject, until = step.subject, step.subject_for
    if step.subject_spellings:
        _older_claims(tx, lease, step)
    tx.execute(
        "INSERT INTO subjects (subject, run_id, seq, step_id, claimed_at, expires_at) "
        f"VALUES (?, ?, ?, ?, {NOW}, {NOW} + ?) ON CONFLICT (subject) DO NOTHING",
        (subject, lease.run_id, step.seq, step.step_id, until),
    )
    # Wait for, then hold, whoever inserted or took it over first (PostgreSQL: the
    # statement after the lock reads their commit).
    row = tx.execute(
        f"SELECT run_id, seq FROM subjects WHERE subject = ?{tx.dialect.for_update}", (subject,)
    ).fetchone()
    if (row[0], row[1]) == (lease.run_id, step.seq):
        return
    holder = _holder(tx, subject)
    if holder is not None and holder[0].state.value not in _FREE and not holder[1]:
        raise SubjectHeld(holder[0])
    tx.execute(
        f"UPDATE subjects SET run_id = ?, seq = ?, step_id = ?, claimed_at = {NOW}, "
        f"expires_at = {NOW} + ? WHERE subject = ?",
        (lease.run_id, step.seq, step.step_id, until, subject),
    )


def _older_claims(tx: Tx, lease: Lease, step: NewStep) -> None:
    """``SubjectHeld`` if another step holds the subject under a spelling an older version
    wrote (``["refund",42.0]``). No claim is written under one any more, so a read finds
    every such claim; one held by this very step (its intent written by the older version)
    is its own."""
    spellings = step.subject_spellings
    marks = ", ".join("?" * len(spellings))
    for row in tx.execute(f"{_HOLDER} WHERE c.subject IN ({marks})", spellings).fetchall():
        holder = _holder_of(row)
        expired = bool(row[10]) and holder.state is StepState.DONE
        mine = (holder.run_id, holder.seq) == (lease.run_id, step.seq)
        if not mine and holder.state.value not in _FREE and not expired:
            raise SubjectHeld(holder)


def _holder(tx: Tx, subject: str | None) -> tuple[SubjectClaim, bool] | None:
    """The subject's holder and whether its claim has expired done; None if the holder's
    step or run is gone (the claim is then taken over)."""
    row = tx.execute(f"{_HOLDER} WHERE c.subject = ?", (subject,)).fetchone()
    if row is None:
        return None
    holder = _holder_of(row)
    return holder, bool(row[10]) and holder.state is StepState.DONE


def _holder_of(row: Any) -> SubjectClaim:
    subject, run_id, seq, step_id, state, live, at, args_hash, result, error = row[:10]
    expires = None if row[11] is None else float(row[11])
    return SubjectClaim(
        subject, run_id, int(seq), step_id, StepState(state), bool(live), float(at),
        args_hash, result, error, expires,
    )  # fmt: skip


def still_done(tx: Tx, holder: SubjectClaim) -> None:
    """Hold the subject's claim and check that ``holder`` is still its holder, done (the
    step about to take its result); ``SubjectHeld`` with the holder now if not."""
    tx.execute(
        f"SELECT 1 FROM subjects WHERE subject = ?{tx.dialect.for_update}", (holder.subject,)
    )
    found = _holder(tx, holder.subject)
    if found is None or found[1] or found[0].state is not StepState.DONE:
        raise SubjectHeld(holder._replace(state=StepState.NOT_DONE))
    if found[0][:4] != holder[:4]:
        raise SubjectHeld(found[0])


def holders(tx: Tx, run_id: str | None, limit: int) -> list[SubjectClaim]:
    where, params = ("WHERE c.run_id = ? ", (run_id,)) if run_id is not None else ("", ())
    rows = tx.execute(
        f"{_HOLDER} {where}ORDER BY c.claimed_at DESC LIMIT ?", (*params, limit)
    ).fetchall()
    return [_holder_of(row) for row in rows]
