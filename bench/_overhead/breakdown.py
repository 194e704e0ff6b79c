"""Where a guarded effect's time goes: each SQL statement timed, and WAL pages counted."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import oncelog
from oncelog.stores import SQLiteStore

from .floor import Floor
from .stats import NS_PER_US
from .workload import CountingTool, EffectInput, open_guarded

# Statement labels by SQL prefix, as ``stores/_sqlite_write.py`` writes them. An intent
# is BEGIN, INSERT steps (the fence, kill-switch and agent-budget checks in its values),
# INSERT journal (the chain head read and the link computed in it), COMMIT; an outcome
# is BEGIN, UPDATE steps (the fence in its WHERE), INSERT journal, COMMIT. The lease is
# extended only once half of it is used, so "lease extension" is rare or absent; the
# general path's fence and halt SELECTs appear only when a check refuses.
COMMIT_LABEL = "COMMIT (the fsync)"
STATEMENTS = (
    ("BEGIN", "BEGIN IMMEDIATE"),
    ("COMMIT", COMMIT_LABEL),
    ("SELECT owner, fencing_token", "SELECT runs: fence"),
    ("UPDATE runs SET lease_expires_at", "UPDATE runs: lease extension"),
    ("INSERT OR IGNORE INTO steps", "INSERT steps: intent row, checks in its values"),
    ("INSERT INTO journal", "INSERT journal: entry, chained in SQL"),
    ("UPDATE steps SET state", "UPDATE steps: outcome, fence in its WHERE"),
    ("INSERT INTO effects", "INSERT effects: intent row"),
    ("UPDATE effects", "UPDATE effects: outcome"),
)
WAL_EFFECTS = 200  # effects whose WAL pages are counted
WAL_WARM = 1000  # effects a used ledger holds before they are counted


class StatementTimes:
    """Adds up the time of each statement, by kind, of every executor wrapped by ``timed``
    (benchmark-only instrumentation: proxies replace the store's objects, not its code)."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}  # by SQL text: the store reuses its strings
        self.ns: dict[str, int] = {}
        self.count: dict[str, int] = {}

    def timed(self, executor: Any) -> Timed:
        return Timed(executor, self)

    def add(self, sql: str, elapsed: int) -> None:
        label = self._labels.get(sql) or self._label(sql)
        self.ns[label] = self.ns.get(label, 0) + elapsed
        self.count[label] = self.count.get(label, 0) + 1

    def _label(self, sql: str) -> str:
        flat = " ".join(sql.split())
        label = next((lb for prefix, lb in STATEMENTS if flat.startswith(prefix)), flat[:48])
        self._labels[sql] = label
        return label

    def reset(self) -> None:
        self.ns.clear()
        self.count.clear()

    def per_effect(self, n: int) -> dict[str, tuple[float, float]]:
        """label -> (us per effect, statements per effect), the costliest first."""
        return {
            label: (self.ns[label] / n / NS_PER_US, self.count[label] / n)
            for label in sorted(self.ns, key=lambda k: -self.ns[k])
        }


class Timed:
    """A connection or cursor whose ``execute`` is timed into ``times``."""

    def __init__(self, executor: Any, times: StatementTimes) -> None:
        self._executor = executor
        self._times = times

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        start = time.perf_counter_ns()
        try:
            result: sqlite3.Cursor = self._executor.execute(sql, parameters)
            return result
        finally:
            self._times.add(sql, time.perf_counter_ns() - start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._executor, name)


@dataclass(frozen=True)
class Breakdown:
    effects: int
    guarded_total_us: float
    guarded: dict[str, tuple[float, float]]  # label -> (us per effect, statements per effect)
    floor_total_us: float
    floor: dict[str, tuple[float, float]]


def store_connection(ledger: oncelog.Ledger) -> sqlite3.Connection:
    return cast(SQLiteStore, ledger.store)._db


def time_store_statements(ledger: oncelog.Ledger) -> StatementTimes:
    """Put timing proxies in place of the store's connection and of the cursor it keeps
    for its transactions (most statements go through the cursor)."""
    times = StatementTimes()
    store = cast(SQLiteStore, ledger.store)
    # mypy: the proxies are not a Connection and a Cursor.
    setattr(store, "_db", times.timed(store._db))  # noqa: B010
    setattr(store, "_cursor", times.timed(store._cursor))  # noqa: B010
    return times


def time_floor_statements(floor: Floor) -> StatementTimes:
    times = StatementTimes()
    floor.db = times.timed(floor.connection)
    return times


def alternate(
    run: oncelog.Run, tool: CountingTool, floor: Floor, items: list[EffectInput]
) -> tuple[int, int]:
    """Guarded and floor effects one after the other, so both see the same machine; the
    total ns of each."""
    guarded_ns = floor_ns = 0
    clock = time.perf_counter_ns
    for item in items:
        t0 = clock()
        run.effect(item.step_id, tool.tool, **item.kwargs)
        t1 = clock()
        floor.effect(item)
        t2 = clock()
        guarded_ns += t1 - t0
        floor_ns += t2 - t1
    return guarded_ns, floor_ns


def measure_breakdown(folder: Path, n: int) -> Breakdown:
    """Time each SQL statement of the guarded path (durability full) and of the floor."""
    items = [EffectInput.make("breakdown", i) for i in range(2 * n)]
    ledger, tool = open_guarded(folder / "breakdown.db")
    timed = time_store_statements(ledger)
    floor = Floor(folder / "breakdown-floor.db", "FULL")
    floor_timed = time_floor_statements(floor)
    with ledger.run("breakdown") as run:
        alternate(run, tool, floor, items[:n])  # warm-up
        timed.reset()
        floor_timed.reset()
        guarded_ns, floor_ns = alternate(run, tool, floor, items[n:])
        # Read before the run's exit adds its own statements.
        guarded, floor_rows = timed.per_effect(n), floor_timed.per_effect(n)
    ledger.close()
    floor.connection.close()
    return Breakdown(n, guarded_ns / n / NS_PER_US, guarded, floor_ns / n / NS_PER_US, floor_rows)


def wal_frames(path: Path, page_size: int) -> int:
    """Frames in a WAL file that is never checkpointed (32-byte header, 24 per frame)."""
    wal = Path(str(path) + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - 32) // (page_size + 24)


def frames_by_btree(path: Path, page_size: int, first: int) -> dict[str, int]:
    """The WAL's frames from the ``first``-th on, counted by the table or index whose page
    each wrote (``dbstat`` maps a page to its b-tree; page 1, the file's header and the
    schema's root, is rewritten whenever the file grows)."""
    with sqlite3.connect(path) as db:
        names = dict(db.execute("SELECT pageno, name FROM dbstat"))
    wal = Path(str(path) + "-wal").read_bytes()
    counts: dict[str, int] = {}
    for offset in range(32 + first * (page_size + 24), len(wal), page_size + 24):
        page = int.from_bytes(wal[offset : offset + 4], "big")
        name = "page 1 (header)" if page == 1 else names.get(page, "freed")
        counts[name] = counts.get(name, 0) + 1
    return counts


def guarded_wal_pages(
    path: Path, items: list[EffectInput], warm: list[EffectInput]
) -> tuple[float, int, dict[str, float]]:
    """(pages per guarded effect, page size, pages per effect by b-tree), counted after
    the ``warm`` effects of another run."""
    ledger, tool = open_guarded(path)
    conn = store_connection(ledger)
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    if warm:
        with ledger.run("walwarm") as run:
            for item in warm:
                run.effect(item.step_id, tool.tool, **item.kwargs)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    with ledger.run("walcount") as run:
        before = wal_frames(path, page_size)
        for item in items:
            run.effect(item.step_id, tool.tool, **item.kwargs)
        pages = (wal_frames(path, page_size) - before) / len(items)
        by_btree = frames_by_btree(path, page_size, before)
    ledger.close()
    return pages, page_size, {name: n / len(items) for name, n in by_btree.items()}


def floor_wal_pages(
    path: Path, items: list[EffectInput], warm: list[EffectInput], page_size: int
) -> float:
    floor = Floor(path, "FULL")
    for item in warm:
        floor.effect(item)
    floor.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    floor.connection.execute("PRAGMA wal_autocheckpoint = 0")
    before = wal_frames(path, page_size)
    for item in items:
        floor.effect(item)
    pages = (wal_frames(path, page_size) - before) / len(items)
    floor.connection.close()
    return pages


def measure_wal_pages(folder: Path, n: int = WAL_EFFECTS) -> dict[str, float]:
    """Database pages each effect appends to the WAL (and so writes and fsyncs), guarded
    and floor: in a new ledger (``guarded``, ``floor``) and in one that already holds
    ``WAL_WARM`` effects (``guarded_warm``, ``floor_warm``: its b-trees have grown the
    levels a used ledger has, and split as they do), the latter by b-tree too (keys
    ``btree:<name>``)."""
    items = [EffectInput.make("walcount", i) for i in range(n)]
    warm = [EffectInput.make("walwarm", i) for i in range(WAL_WARM)]
    guarded, page_size, _ = guarded_wal_pages(folder / "walcount.db", items, [])
    floor = floor_wal_pages(folder / "walcount-floor.db", items, [], page_size)
    guarded_warm, _, by_btree = guarded_wal_pages(folder / "walwarm.db", items, warm)
    floor_warm = floor_wal_pages(folder / "walwarm-floor.db", items, warm, page_size)
    pages = {"guarded": guarded, "floor": floor, "page_size": float(page_size)}
    pages |= {"guarded_warm": guarded_warm, "floor_warm": floor_warm}
    return pages | {f"btree:{name}": n for name, n in by_btree.items()}
