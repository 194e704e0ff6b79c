"""A decision link taken once: the row of ``used_links`` a decision made through a
notice's link writes in its own transaction, before anything else it writes. Its key is
the link's signed nonce, so a second confirmation of the link (at the same instant, in
another process, on another machine) finds it taken and decides nothing, whatever the
decision's own checks would have let through; a decision that fails rolls its row back
with it, and the link still works."""

from __future__ import annotations

import time

from .._exceptions import LinkUsed
from ..records._records import UsedLink
from ._sql import NOW, Tx

_COLUMNS = "nonce, run_id, decision, used_by, used_at"


def take(tx: Tx, nonce: str, run_id: str, decision: str, by: str) -> None:
    """Mark the link ``nonce`` used for ``decision`` on ``run_id`` by ``by``; ``LinkUsed``
    (naming who used it, when, for what) if a committed decision took it first. On
    PostgreSQL a concurrent transaction's uncommitted row makes this one wait for its end:
    taken if it committed, free if it rolled back."""
    row = tx.execute(
        f"INSERT INTO used_links ({_COLUMNS}) VALUES (?, ?, ?, ?, {NOW}) "
        "ON CONFLICT (nonce) DO NOTHING RETURNING nonce",
        (nonce, run_id, decision, by),
    ).fetchone()
    if row is not None:
        return
    first = used(tx, nonce)
    raise LinkUsed(
        "this link decided already"
        + (
            ""
            if first is None
            else f": {first.decision} by {first.by} at "
            + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(first.at))
        )
        + ". A link is good for its one decision, once: nothing more is recorded",
        used_by=None if first is None else first.by,
        used_at=None if first is None else first.at,
        decision=None if first is None else first.decision,
        run_id=run_id,
    )


def used(tx: Tx, nonce: str) -> UsedLink | None:
    """The decision the link ``nonce`` made, if it made one."""
    row = tx.execute(f"SELECT {_COLUMNS} FROM used_links WHERE nonce = ?", (nonce,)).fetchone()
    if row is None:
        return None
    return UsedLink(str(row[0]), str(row[1]), str(row[2]), str(row[3]), float(row[4]))
