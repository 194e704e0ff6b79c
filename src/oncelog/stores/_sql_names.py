"""Refusals of a name nobody recorded, read inside the request's transaction so they list
the nearest names that are there: a person who mistyped a run id at 3 a.m. sees the one
they meant instead of a bare "not found"."""

from __future__ import annotations

from .._exceptions import UnknownRun
from . import _sql_tombstones as tombstones
from ._sql import Tx

# How many names a refusal compares with: the newest ones, so a large ledger's refusal
# stays one bounded read.
_COMPARED = 5000
_LISTED = 3


def nearest(name: str, among: list[str]) -> list[str]:
    """Up to three of ``among`` closest to ``name``, closest first."""
    import difflib  # only when an id is unknown

    return difflib.get_close_matches(name, among, n=_LISTED, cutoff=0.6)


def did_you_mean(name: str, among: list[str]) -> str:
    """``; did you mean 'a' or 'b'?``, or nothing when no name is near."""
    close = nearest(name, among)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def unknown_run(tx: Tx, run_id: str) -> UnknownRun:
    """No run ``run_id``: the error names the nearest run ids the ledger holds, or says
    that a prune removed it (``RunPruned``)."""
    pruned = tombstones.pruned(tx, run_id)
    if pruned is not None:
        return pruned
    return UnknownRun(f"no run named {run_id!r}{did_you_mean(run_id, run_ids(tx))}", run_id=run_id)


def run_ids(tx: Tx) -> list[str]:
    rows = tx.execute(
        "SELECT run_id FROM runs ORDER BY updated_at DESC LIMIT ?", (_COMPARED,)
    ).fetchall()
    return [str(row[0]) for row in rows]


def agents(tx: Tx) -> list[str]:
    rows = tx.execute(
        "SELECT DISTINCT agent FROM runs WHERE agent IS NOT NULL LIMIT ?", (_COMPARED,)
    ).fetchall()
    return [str(row[0]) for row in rows]


def has_agent(tx: Tx, agent: str) -> bool:
    return tx.execute("SELECT 1 FROM runs WHERE agent = ? LIMIT 1", (agent,)).fetchone() is not None
