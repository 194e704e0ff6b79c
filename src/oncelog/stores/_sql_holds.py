"""Holds on a resource: taking one, giving it up, a person's release, in the caller's
transaction.

A hold is live while its holder keeps the lease it took it with (``holder_token`` is the
run's fencing token, the lease unexpired by the store's clock), or while an effect its
holder began since taking it is in doubt (``in_flight`` or ``unknown``): whoever acts on
the resource next must not act before that effect's outcome is known. The resource's row
is locked first (before runs' rows: docs/architecture.md, lock order) and never deleted,
so every taking writes a token greater than the last.
"""

from __future__ import annotations

from .._commands import oncelog_command
from .._exceptions import HoldInDoubt, ResourceHeld, UnknownHold, decide_text
from ..records._records import HoldRecord
from ._protocol import Lease
from ._rows import journal_json, text
from ._sql import NOW, Tx
from ._sql_guards import in_doubt
from ._sql_tx import append, fence

_LEASE_LIVE = (
    "EXISTS (SELECT 1 FROM runs r WHERE r.run_id = h.holder AND r.owner IS NOT NULL "
    f"AND r.fencing_token = h.holder_token AND r.lease_expires_at > {NOW})"
)
_IN_DOUBT = (
    "EXISTS (SELECT 1 FROM steps s WHERE s.run_id = h.holder AND s.type = 'effect' "
    f"AND {in_doubt('s.state')} AND s.started_at >= h.acquired_at)"
)
_STATE = (
    "CASE WHEN h.released_at IS NOT NULL THEN 'free' "
    f"WHEN {_LEASE_LIVE} THEN 'held' WHEN {_IN_DOUBT} THEN 'blocked' ELSE 'lapsed' END"
)
SELECT_HOLDS = (
    f"SELECT h.resource, h.holder, h.token, h.acquired_at, h.released_at, {_STATE} FROM holds h"
)


def _locked(tx: Tx, resource: str) -> tuple[str, int, int, str] | None:
    """The hold's holder, its lease token, the hold's token and state, its row locked."""
    row = tx.execute(
        f"SELECT h.holder, h.holder_token, h.token, {_STATE} FROM holds h "
        f"WHERE h.resource = ?{tx.dialect.for_update}",
        (resource,),
    ).fetchone()
    return None if row is None else (row[0], int(row[1]), int(row[2]), row[3])


def take(tx: Tx, lease: Lease, resource: str) -> int:
    """``Store.take_hold``. A restart of the holder (a new lease of the same run) takes it
    again, blocked or not, with a new token: it recovers its own effect in doubt by the
    usual rules."""
    # A row to lock even for the first taker; as inserted, it is free.
    tx.execute(
        "INSERT INTO holds (resource, holder, holder_token, token, acquired_at, released_at) "
        f"VALUES (?, ?, 0, 0, {NOW}, {NOW}) ON CONFLICT (resource) DO NOTHING",
        (resource, lease.run_id),
    )
    holder, holder_token, token, state = _locked(tx, resource)  # type: ignore[misc]
    fence(tx, lease)
    ours = holder == lease.run_id and state != "free"
    if ours and holder_token == lease.token:
        return token
    if not ours and state == "held":
        raise ResourceHeld(
            f"{resource} is held by run {holder} (its lease runs); try again later",
            run_id=lease.run_id,
            resource=resource,
            holder=holder,
        )
    if not ours and state == "blocked":
        raise _blocked(tx, lease.run_id, resource, holder)
    since = "acquired_at" if ours else NOW  # a restart keeps what its doubt is counted from
    acquired = tx.execute(
        "UPDATE holds SET holder = ?, holder_token = ?, token = token + 1, "
        f"acquired_at = {since}, released_at = NULL WHERE resource = ? RETURNING acquired_at",
        (lease.run_id, lease.token, resource),
    ).fetchone()[0]
    taken_from = None if state == "free" or holder == lease.run_id else text(holder)
    entry = journal_json(
        resource=text(resource), token=str(token + 1), lease=str(lease.token),
        lapsed_from=taken_from,
    )  # fmt: skip
    # A new holder's record carries the row's acquired_at to the bit (``verify``).
    append(tx, lease.run_id, None, "hold_acquired", entry, at=None if ours else acquired)
    return token + 1


def _blocked(tx: Tx, run_id: str, resource: str, holder: str) -> HoldInDoubt:
    """The refusal of a hold whose holder's process is gone and whose effect in doubt
    keeps it: only that run's restart or a person's decision on that step frees it, so
    the message names the step, its attempt and the decisions on it."""
    row = tx.execute(
        "SELECT s.step_id, s.attempts FROM holds h JOIN steps s ON s.run_id = h.holder "
        f"WHERE h.resource = ? AND s.type = 'effect' AND {in_doubt('s.state')} "
        "AND s.started_at >= h.acquired_at ORDER BY s.seq LIMIT 1",
        (resource,),
    ).fetchone()
    step, attempt = (str(row[0]), int(row[1])) if row is not None else ("?", None)
    return HoldInDoubt(
        f"{resource} is held by run {holder}, no live process holds that run, and its "
        f"effect {step!r}, begun under the hold, is in doubt: a restart of this run does "
        f"not free it. Restart run {holder} (it probes, resends or halts as for any effect "
        f"in doubt), or decide that step, one of: {decide_text(holder, step, attempt)}; "
        f"{oncelog_command('show', [holder])} shows it",
        run_id=run_id, resource=resource, holder=holder, held_by_step=step,
    )  # fmt: skip


def give_up(tx: Tx, lease: Lease, resource: str, token: int) -> bool:
    """``Store.give_up_hold``, at the end of the hold's ``with`` block."""
    found = _locked(tx, resource)
    if found is None or found[0] != lease.run_id or found[2] != token or found[3] == "free":
        return False
    fence(tx, lease)
    in_doubt = tx.execute(
        f"SELECT {_IN_DOUBT} FROM holds h WHERE h.resource = ?", (resource,)
    ).fetchone()[0]
    if in_doubt:
        return False
    _release(tx, resource, lease.run_id, journal_json(resource=text(resource), token=str(token)))
    return True


def release_by_person(tx: Tx, resource: str, *, by: str, why: str, force: bool) -> HoldRecord:
    """``Store.release_hold``. A hold blocked by an effect in doubt is a person's to free
    (they decide the world is safe)."""
    found = _locked(tx, resource)
    if found is None or found[3] == "free":
        raise UnknownHold(f"no run holds {resource}; `oncelog holds` lists the holds")
    holder, _, token, state = found
    if state == "held" and not force:
        raise ResourceHeld(
            f"{resource} is held by run {holder}, whose lease runs; wait for it to end, "
            "or release it with --force if that process is gone",
            run_id=holder,
            resource=resource,
            holder=holder,
        )
    entry = journal_json(
        resource=text(resource), token=str(token), by=text(by), why=text(why),
        state=text(state), forced="true" if force and state == "held" else None,
    )  # fmt: skip
    _release(tx, resource, holder, entry)
    row = tx.execute(f"{SELECT_HOLDS} WHERE h.resource = ?", (resource,)).fetchone()
    return hold_record(row)


def _release(tx: Tx, resource: str, holder: str, entry: str) -> None:
    released = tx.execute(
        f"UPDATE holds SET released_at = {NOW} WHERE resource = ? RETURNING released_at",
        (resource,),
    ).fetchone()[0]
    append(tx, holder, None, "hold_released", entry, at=released)


def hold_record(row: tuple[object, ...]) -> HoldRecord:
    resource, holder, token, since, released_at, state = row
    return HoldRecord(
        resource=str(resource),
        holder=str(holder),
        token=int(token),  # type: ignore[call-overload]
        since=float(since),  # type: ignore[arg-type]
        released_at=None if released_at is None else float(released_at),  # type: ignore[arg-type]
        state=str(state),
    )
