"""Retention's SQL: which runs may be pruned, removing them with the anchor of their
chains, and the ledger's size.

A run may go once nothing can still happen to it and nothing still depends on it: it
ended (``completed``, or ``failed`` by the agent's own error, not by a stop that waits
for a person's decision), its lease is not live, no step of it is in doubt
(``in_flight``, ``unknown``), no approval of it is pending, no kill switch on it is on,
it is not the last holder of any hold (the row keeps the next holder's token greater),
no subject claim of it is still in force, and it ended before today (UTC): agents' daily
budgets count today's steps, so a run ended today stays until its day is over (and so
does a run with a step started today, whatever its row says).

Each run removed leaves a tombstone (``pruned_runs``, schema 27) in the transaction that
removes it (``_sql_tombstones``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._exceptions import UnknownName
from ..records._retention import LedgerSize, PruneBatch, PrunedRun
from . import _sql_tombstones as tombstones
from ._sql import NOW, TODAY, Tx
from ._sql_evidence import checkpoint
from ._sql_guards import in_doubt
from ._sql_queue import AFTER_APPROVAL, AFTER_BUDGET, AFTER_HALT_CLEARED, AFTER_RESOLVE
from ._sql_tx import append, lock_run

# Stops that a person's decision lets go on (``_sql_queue``): such a run waits for one.
_AWAITING = ", ".join(
    f"'{error}'" for error in (*AFTER_RESOLVE, *AFTER_APPROVAL, *AFTER_BUDGET, *AFTER_HALT_CLEARED)
)
PRUNABLE = (
    "r.status IN ('completed', 'failed') AND r.stop IS NULL "
    f"AND (r.stopped_by IS NULL OR r.stopped_by NOT IN ({_AWAITING})) "
    f"AND (r.lease_expires_at IS NULL OR r.lease_expires_at < {NOW}) "
    f"AND r.updated_at < {TODAY} "
    "AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.run_id "
    f"AND ({in_doubt('s.state')} OR s.started_at >= {TODAY})) "
    "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.run_id "
    "AND a.status = 'pending') "
    "AND NOT EXISTS (SELECT 1 FROM halts h WHERE h.scope = 'run' AND h.target = r.run_id "
    "AND h.cleared_at IS NULL) "
    "AND NOT EXISTS (SELECT 1 FROM holds o WHERE o.holder = r.run_id) "
    "AND NOT EXISTS (SELECT 1 FROM subjects c WHERE c.run_id = r.run_id "
    f"AND (c.expires_at IS NULL OR c.expires_at > {NOW}))"
)

# The length and head of a run's chain (records written before the chain have no hash).
_CHAIN = (
    "SELECT COUNT(*), (SELECT hash FROM journal WHERE run_id = ? AND hash IS NOT NULL "
    "ORDER BY id DESC LIMIT 1) FROM journal WHERE run_id = ? AND hash IS NOT NULL"
)

# A removed run's rows, children first (approvals and steps name their run).
_REMOVE = (
    "DELETE FROM journal WHERE run_id = ?",
    "DELETE FROM checkpoints WHERE run_id = ?",
    "DELETE FROM steps WHERE run_id = ?",
    "DELETE FROM approvals WHERE run_id = ?",
    "DELETE FROM halts WHERE scope = 'run' AND target = ?",
    "DELETE FROM subjects WHERE run_id = ?",
    "DELETE FROM used_links WHERE run_id = ?",
    "DELETE FROM runs WHERE run_id = ?",
)


def check_agents(tx: Tx, agents: Iterable[str]) -> None:
    """``UnknownName`` for an agent no run names, no budget or policy is set for, and no
    earlier prune removed a run of."""
    for agent in sorted(agents):
        # Named by an earlier prune's anchor: its runs are gone, its window still holds.
        pattern = _escaped(json.dumps(agent, ensure_ascii=False))
        known = tx.execute(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE agent = ?) "
            "OR EXISTS (SELECT 1 FROM agent_budgets WHERE agent = ?) "
            "OR EXISTS (SELECT 1 FROM retention_policy WHERE agent = ?) "
            "OR EXISTS (SELECT 1 FROM journal WHERE run_id = '' AND event = 'runs_pruned' "
            "AND data LIKE ? ESCAPE '!')",
            (agent, agent, agent, f'%"agents":[%{pattern}%'),
        ).fetchone()
        if not known[0]:
            raise UnknownName(f"no run of this ledger names agent {agent!r}, nor did any pruned")


def candidates(
    tx: Tx, older_than: float | None, agents: Mapping[str, float], limit: int
) -> list[str]:
    """Runs that may go and ended longer ago than their window (an agent's own, else the
    ledger's), the longest ended first (``check_agents`` first)."""
    check_agents(tx, agents)
    windows: list[str] = []
    params: list[Any] = []
    named = sorted(agents)
    for agent in named:
        windows.append(f"(r.agent = ? AND r.updated_at < {NOW} - ?)")
        params += [agent, agents[agent]]
    if older_than is not None:
        marks = ", ".join("?" * len(named))
        others = f"(r.agent IS NULL OR r.agent NOT IN ({marks})) AND " if named else ""
        windows.append(f"({others}r.updated_at < {NOW} - ?)")
        params += [*named, older_than]
    if not windows:
        return []
    rows = tx.execute(
        f"SELECT r.run_id FROM runs r WHERE ({' OR '.join(windows)}) AND {PRUNABLE} "
        "ORDER BY r.updated_at, r.run_id LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [str(row[0]) for row in rows]


def _escaped(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def remove(
    tx: Tx,
    runs: Sequence[PrunedRun],
    archive: str,
    archive_sha256: str,
    signer: tuple[str, Callable[[str], str]] | None,
) -> PruneBatch:
    """Remove the runs that still may go and whose chains are still as archived, and
    journal their chains' lengths and heads under no run (``runs_pruned``), the anchor
    that ``verify`` and an archive's check read; with ``signer``, sign that chain too."""
    wanted = sorted(runs)  # rows locked in one order by every prune
    present = [run for run in wanted if lock_run(tx, run.run_id)]
    gone = [run.run_id for run in wanted if run not in present]
    removed: list[PrunedRun] = []
    kept: list[str] = []
    agents: set[str] = set()
    ends: list[tuple[str, str | None]] = []  # each removed run's status and agent
    for run in present:
        may_go = tx.execute(
            f"SELECT r.agent, r.status FROM runs r WHERE r.run_id = ? AND {PRUNABLE}",
            (run.run_id,),
        ).fetchone()
        tx.lock_journal(run.run_id)  # no record is appended to it before the commit
        entries, head = tx.execute(_CHAIN, (run.run_id, run.run_id)).fetchone()
        # A ledger's records from before the chain have no hash: such a run's head is "".
        if may_go is None or (int(entries), head or "") != (run.entries, run.head):
            kept.append(run.run_id)
            continue
        removed.append(run)
        ends.append((str(may_go[1]), may_go[0]))
        if may_go[0] is not None:
            agents.add(str(may_go[0]))
    if not removed:
        return PruneBatch([], gone, kept, None)
    for run in removed:
        tx.execute("INSERT INTO prune_permits (run_id) VALUES (?)", (run.run_id,))
        for statement in _REMOVE:
            tx.execute(statement, (run.run_id,))
    tx.execute("DELETE FROM prune_permits")
    data = json.dumps(
        {
            "agents": sorted(agents),  # so that their windows still apply once all are gone
            "archive": archive,
            "archive_sha256": archive_sha256,
            "runs": [list(run) for run in removed],
        },
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    append(tx, "", None, "runs_pruned", data)
    anchor = tx.execute(
        "SELECT id FROM journal WHERE run_id = '' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    for run, (status, agent) in zip(removed, ends, strict=True):
        tombstones.bury(tx, run.run_id, int(anchor[0]), status, agent)
    if signer is not None:
        checkpoint(tx, "", signer[0], signer[1])
    return PruneBatch(removed, gone, kept, int(anchor[0]))


# Above this many rows PostgreSQL's own estimate (kept by autovacuum's ANALYZE) stands for
# a count: counting a journal of millions at every scrape would read it whole each time.
ESTIMATED_FROM = 1_000_000


def _rows(tx: Tx, table: str) -> int:
    if tx.dialect.name != "sqlite":
        estimate = tx.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(?)", (table,)
        ).fetchone()
        if estimate is not None and estimate[0] is not None and estimate[0] >= ESTIMATED_FROM:
            return int(estimate[0])
    return int(tx.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def size(tx: Tx) -> LedgerSize:
    oldest = tx.execute("SELECT MIN(created_at) FROM runs").fetchone()[0]
    if tx.dialect.name == "sqlite":
        found = tx.execute(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
        ).fetchone()
    else:
        found = tx.execute(
            "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c "
            "WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace"
        ).fetchone()
    on_disk = None if found is None or found[0] is None else int(found[0])
    return LedgerSize(
        _rows(tx, "runs"), _rows(tx, "steps"), _rows(tx, "journal"),
        None if oldest is None else float(oldest), on_disk,
    )  # fmt: skip


def set_policy(tx: Tx, agent: str, keep: float | None, by: str) -> None:
    """Set (None: remove) how long runs are kept, for ``agent`` ('' the ledger's)."""
    if keep is None:
        tx.execute("DELETE FROM retention_policy WHERE agent = ?", (agent,))
    else:
        tx.execute(
            "INSERT INTO retention_policy (agent, keep, set_by, set_at) "
            f"VALUES (?, ?, ?, {NOW}) ON CONFLICT (agent) DO UPDATE SET "
            "keep = excluded.keep, set_by = excluded.set_by, set_at = excluded.set_at",
            (agent, keep, by),
        )
    data = json.dumps({"agent": agent, "by": by, "keep": keep}, ensure_ascii=False,
                      separators=(",", ":"), sort_keys=True)  # fmt: skip
    append(tx, "", None, "retention_set", data)


def policy(tx: Tx) -> dict[str, float]:
    rows = tx.execute("SELECT agent, keep FROM retention_policy ORDER BY agent").fetchall()
    return {str(agent): float(keep) for agent, keep in rows}
