"""A pruned run's tombstone (``pruned_runs``, schema 27): written by the transaction of
``_sql_prune.remove`` that removes the run, read by every way a run id is entered.

Entering a run creates its row when the ledger holds none; for a run id that a prune
removed, that would start the run afresh and perform its effects again. So each insert
of a run (``_sql_runs.create``, ``_sqlite_runs.create_leased``, ``SQLStore.submit``)
reads the tombstone after its row is written, in the same transaction, and a refusal
(``RunPruned``) rolls the row back; a name no run has (``_sql_names.unknown_run``) says
it was pruned. The read comes after the insert, as its own statement or the insert's
``RETURNING``: on PostgreSQL an insert that waited for a prune removing that row reads a
snapshot taken after the prune committed, its tombstone included. A tombstone is never
pruned; only a person's ``forget`` removes one, journalled under no run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from .._exceptions import RunPruned, UnknownRun
from ..records._serialization import canonical_json
from ._sql import Tx
from ._sql_tx import append

# A run's row is written, then this says whether a prune removed a run of that id.
IS_PRUNED = "EXISTS (SELECT 1 FROM pruned_runs WHERE run_id = ?)"


def bury(tx: Tx, run_id: str, anchor: int, status: str, agent: str | None) -> None:
    """The tombstone of a run removed under the ``runs_pruned`` record ``anchor``."""
    tx.execute(
        "INSERT INTO pruned_runs (run_id, anchor, status, agent) VALUES (?, ?, ?, ?)",
        (run_id, anchor, status, agent),
    )


_TOMBSTONE = (
    "SELECT t.status, t.agent, t.anchor, j.at, j.data FROM pruned_runs t "
    "JOIN journal j ON j.id = t.anchor WHERE t.run_id = ?"
)


def pruned(tx: Tx, run_id: str) -> RunPruned | None:
    """The refusal of entering ``run_id`` if a prune removed it (None: it did not)."""
    row = tx.execute(_TOMBSTONE, (run_id,)).fetchone()
    if row is None:
        return None
    status, agent, anchor, at, data = row
    archive = str(json.loads(data)["archive"])
    whose = "" if agent is None else f" of agent {agent!r}"
    when = datetime.fromtimestamp(float(at), timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return RunPruned(
        f"run {run_id!r}{whose} {status} and was pruned on {when}: its records are in the "
        f"archive {archive}; it is not run again (`oncelog prune --forget` lets the id "
        "start a new run)",
        run_id=run_id, status=str(status), archive=archive, pruned_at=float(at),
        anchor=int(anchor),
    )  # fmt: skip


def refusal(tx: Tx, run_id: str) -> RunPruned:
    """``pruned``, for a run id the insert found a tombstone of."""
    found = pruned(tx, run_id)
    assert found is not None, "a tombstone read in this transaction is there"
    return found


def forget(tx: Tx, run_id: str, by: str) -> RunPruned:
    """Remove ``run_id``'s tombstone, journalled under no run (``pruned_run_forgotten``),
    so that the id may start a new run: the refusal it replaces (``UnknownRun`` if no
    prune removed such a run)."""
    refusal = pruned(tx, run_id)
    # The delete's count, not the read: of two people forgetting it at once, one does.
    if (
        refusal is None
        or tx.execute("DELETE FROM pruned_runs WHERE run_id = ?", (run_id,)).rowcount != 1
    ):
        raise UnknownRun(f"no prune removed a run named {run_id!r}", run_id=run_id)
    data = canonical_json({"anchor": refusal.anchor, "by": by, "run_id": run_id})
    append(tx, "", None, "pruned_run_forgotten", data)
    return refusal
