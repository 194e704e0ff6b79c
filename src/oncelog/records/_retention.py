"""What retention (``oncelog prune``) hands between the store and the audit: a removed
run's chain as it ended, what one prune transaction did, and the ledger's size."""

from __future__ import annotations

from ._value import NamedTuple


class PrunedRun(NamedTuple):
    """A run's chain as archived and removed: its length and its last hash."""

    run_id: str
    entries: int  # records of its chain (those written before the chain carry no hash)
    head: str  # the hash of its last record


class PruneBatch(NamedTuple):
    """One prune transaction: the runs it removed, those already gone, and those it kept
    because they changed since they were archived or may no longer go."""

    removed: list[PrunedRun]
    gone: list[str]
    kept: list[str]
    anchor_id: int | None  # the journal id of its ``runs_pruned`` record, if it removed any


class LedgerSize(NamedTuple):
    """How much the ledger holds, for the console and the metrics. On PostgreSQL a table
    of a million rows or more is counted by the server's estimate (``stores/_sql_prune``)."""

    runs: int
    steps: int
    records: int  # journal records
    oldest_run_at: float | None  # the creation time of its oldest run
    bytes: int | None  # the database's size on disk, where the store can tell
