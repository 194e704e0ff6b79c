"""What pruning costs: ``Ledger.prune`` per run removed, as a ratio to a bare ``DELETE``
of the same rows in the same batches, and the ledger's size before and after.

    python bench/retention.py [--runs N] [--effects N] [--batch N] [--dir DIR] [--keep]

One SQLite ledger is filled with ``--runs`` completed runs of ``--effects`` effects each
(durability ``process``: the fill is not what is measured), every run moved three days
into the past, and copied. On one copy ``Ledger.prune`` archives every run to a file
(fsynced) and removes them ``--batch`` at a time, each batch one fsynced transaction that
checks each run under its lock and appends the anchor. On the other the floor: the same
rows deleted by a bare ``sqlite3`` connection (the journal's triggers dropped), one fsynced
transaction per batch, nothing read, nothing archived. Both are timed (wall time) in the
same invocation; the result is their ratio. Nothing here is a timed assertion.

What stays of each removed run is its tombstone (``pruned_runs``): its pages' bytes
(SQLite's ``dbstat``) per run removed are printed beside the bytes a run held before.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from overhead import bench_folder

import oncelog

DAY = 86400.0
_FLOOR = (
    "DELETE FROM journal WHERE run_id = ?",
    "DELETE FROM checkpoints WHERE run_id = ?",
    "DELETE FROM steps WHERE run_id = ?",
    "DELETE FROM approvals WHERE run_id = ?",
    "DELETE FROM halts WHERE scope = 'run' AND target = ?",
    "DELETE FROM subjects WHERE run_id = ?",
    "DELETE FROM runs WHERE run_id = ?",
)


def fill(path: Path, runs: int, effects: int) -> list[str]:
    ids = [f"run-{n:06}" for n in range(runs)]
    with oncelog.open(str(path), durability="process") as ledger:

        @ledger.tool(kind="create")
        def act(n: int, *, idempotency_key: str) -> dict[str, Any]:
            return {"n": n, "note": "an ordinary result of a few dozen bytes"}

        for run_id in ids:
            with ledger.run(run_id) as run:
                for n in range(effects):
                    run.effect(f"s{n}", act, n)
    with closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE runs SET updated_at = updated_at - ?", (3 * DAY,))
        db.execute("UPDATE steps SET started_at = started_at - ?", (3 * DAY,))
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return ids


def size(path: Path) -> tuple[int, int]:
    """(bytes of the file, bytes in use: the file less its free pages)."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, page = (db.execute(f"PRAGMA {name}").fetchone()[0]
                             for name in ("page_count", "freelist_count", "page_size"))  # fmt: skip
    return pages * page, (pages - free) * page


def tombstone_bytes(path: Path) -> int:
    """The pages of ``pruned_runs`` (a table without rowid: its key is the table)."""
    with closing(sqlite3.connect(path)) as db:
        found = db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = 'pruned_runs'")
        return int(found.fetchone()[0] or 0)


def floor(path: Path, ids: list[str], batch: int) -> float:
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # an fsync per commit, as a prune's batch
        db.execute("DROP TRIGGER IF EXISTS journal_no_delete")
        db.execute("DROP TRIGGER IF EXISTS checkpoints_no_delete")
        start = time.perf_counter()
        for first in range(0, len(ids), batch):
            db.execute("BEGIN IMMEDIATE")
            for run_id in ids[first : first + batch]:
                for statement in _FLOOR:
                    db.execute(statement, (run_id,))
            db.execute("COMMIT")
        return time.perf_counter() - start


def prune(path: Path, archive: Path, batch: int) -> tuple[float, int]:
    with oncelog.open(str(path), durability="full") as ledger:
        start = time.perf_counter()
        report = ledger.prune(archive, older_than=DAY, batch=batch, limit=10**9)
        took = time.perf_counter() - start
        assert ledger.verify().ok
    return took, len(report.removed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=2_000)
    parser.add_argument("--effects", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--dir", type=Path, help="where the databases go (default /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--allow-tmpfs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    with bench_folder(args.dir, args.keep, args.allow_tmpfs) as folder:
        full, bare = folder / "pruned.db", folder / "floor.db"
        ids = fill(full, args.runs, args.effects)
        shutil.copy(full, bare)
        before = size(full)
        floor_s = floor(bare, ids, args.batch)
        prune_s, removed = prune(full, folder / "archive.jsonl", args.batch)
        after = size(full)
        tombstones = tombstone_bytes(full)
        archive_bytes = (folder / "archive.jsonl").stat().st_size
    assert removed == len(ids), (removed, len(ids))
    load = Path("/proc/loadavg").read_text().split()[0]
    when = time.strftime("%Y-%m-%d %H:%M %Z")
    print(f"Generated by `python bench/retention.py --runs {args.runs} --effects "
          f"{args.effects} --batch {args.batch}` on {when}, load average {load}.\n")  # fmt: skip

    def per_run(seconds: float) -> float:
        return seconds / len(ids) * 1e6

    print("| | us per run removed | vs the floor |")
    print("|---|---:|---:|")
    print(f"| bare DELETE (floor) | {per_run(floor_s):.0f} | 1.00x |")
    print(f"| `Ledger.prune` (archive + checks + anchor) | {per_run(prune_s):.0f} | "
          f"{prune_s / floor_s:.2f}x |\n")  # fmt: skip

    def mib(count: int) -> float:
        return count / 1048576

    print("| ledger | file MiB | in use MiB |")
    print("|---|---:|---:|")
    print(f"| before, {len(ids):,} runs of {args.effects} effects | {mib(before[0]):.1f} | "
          f"{mib(before[1]):.1f} |")  # fmt: skip
    print(f"| after the prune | {mib(after[0]):.1f} | {mib(after[1]):.1f} |")
    print(f"\nArchive: {mib(archive_bytes):.1f} MiB, {archive_bytes / len(ids):.0f} bytes per run.")
    print(
        f"Tombstones: {tombstones / len(ids):.0f} bytes per run removed, where a run held "
        f"{(before[1] - after[1]) / len(ids):.0f} bytes of pages in use before."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
