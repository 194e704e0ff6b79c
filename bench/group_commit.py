"""Runs in one process sharing fsyncs (group commit), on each store.

    python bench/group_commit.py [--quick] [--runs 1 8 32 100] [--effects N]
        [--stores sqlite postgresql] [--postgres URL] [--baseline OLD_SRC] [--dir DIR]
        [--reps N] [--write docs/benchmarks.md]

For each number of runs in flight, one child process opens a fresh ledger and starts
that many threads, each a run of effects of a no-op tool (so the ledger's cost is what
is measured), all let go together; durability ``intent``. Reported: effects per second,
the process's CPU per effect, and syncs per effect: on SQLite the store's own
``fdatasync`` calls of the WAL (counted by wrapping ``os.fdatasync`` before oncelog is
imported, so an older tree is counted alike; SQLite's checkpoints sync on their own, about
0.02 per effect, not counted), on PostgreSQL the server's WAL syncs (``pg_stat_wal``,
the whole cluster: anything else it serves meanwhile counts too). ``--baseline`` runs the
same children on another tree's ``src`` folder, side by side. Each row is the median of
``--reps`` repetitions, the trees and the numbers of runs taking turns within each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import HasFileno

from _blocks import write_block
from _workers import postgres

HERE = Path(__file__).resolve().parent


def child(url: str, runs: int, effects: int) -> dict[str, float]:
    """One measurement, in this process: ``runs`` threads of ``effects`` effects each."""
    synced = [0]
    real = os.fdatasync

    def counted(fd: int | HasFileno) -> None:
        synced[0] += 1
        real(fd)

    os.fdatasync = counted  # before oncelog binds it
    import oncelog

    wal_syncs = _pg_wal_syncs(url)
    with oncelog.open(url, lease_ttl=3600) as ledger:
        tool = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
        go = threading.Barrier(runs + 1)

        def one_run(i: int) -> None:
            go.wait()
            with ledger.run(f"run-{i}") as run:
                for n in range(effects):
                    run.effect(f"e{n}", tool, n)

        threads = [threading.Thread(target=one_run, args=(i,)) for i in range(runs)]
        for thread in threads:
            thread.start()
        synced[0], before = 0, wal_syncs()
        cpu, began = time.process_time(), time.perf_counter()
        go.wait()
        for thread in threads:
            thread.join()
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        syncs = synced[0] if not url.startswith("postgres") else wal_syncs() - before
    total = runs * effects
    return {"per_s": total / wall, "cpu_ms": cpu * 1000 / total, "syncs": syncs / total}


def _pg_wal_syncs(url: str) -> Any:
    def none() -> int:
        return 0

    if not url.startswith("postgres"):
        return none

    def read() -> int:
        with postgres.connect(url) as conn:
            return int(conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0])

    return read


def measure(src: Path, url: str, runs: int, effects: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    argv = [sys.executable, __file__, "--child", url, str(runs), str(effects)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    result: dict[str, float] = json.loads(done.stdout)
    return result


def fresh_url(store: str, folder: Path, label: str, admin: str) -> str:
    if store == "sqlite":
        return str(folder / f"{label}.db")
    schema = f"oncelog_group_{label}_{os.getpid()}"
    with postgres.connect(admin) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    return postgres.schema_url(admin, schema)


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, runs, effects = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(child(url, runs, effects)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 8, 32, 100])
    parser.add_argument("--effects", type=int, help="per measurement (default 1600, quick 400)")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--postgres", default=postgres.DEFAULT_URL)
    parser.add_argument("--baseline", type=Path, help="another tree's src folder, beside")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, quick 1)")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--write", type=Path)
    args = parser.parse_args(argv)
    total = args.effects or (400 if args.quick else 1600)
    reps = args.reps or (1 if args.quick else 3)
    from overhead import bench_folder

    trees = [("this tree", HERE.parent / "src")]
    trees += [("baseline", args.baseline)] if args.baseline else []
    lines = [
        f"Generated by `python bench/group_commit.py{' --quick' if args.quick else ''}"
        f"{' --baseline ...' if args.baseline else ''}` on {time.strftime('%Y-%m-%d %H:%M %Z')}"
        f", {total} effects per measurement, median of {reps}, durability `intent`, load average "
        f"{os.getloadavg()[0]:.1f} at start.",
        "",
        "| store | tree | runs in flight | effects/s | CPU ms per effect | syncs per effect |",
        "|---|---|---:|---:|---:|---:|",
    ]
    rows = [(store, runs, tree) for store in args.stores for runs in args.runs for tree in trees]
    got: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    with bench_folder(args.dir, False, allow_tmpfs=False) as folder:
        for rep in range(reps):
            for store, runs, (name, src) in rows:
                label = f"{store[:2]}_{runs}_{name[0]}_{rep}"
                url = fresh_url(store, folder, label, args.postgres)
                got.setdefault((store, runs, name), []).append(
                    measure(src, url, runs, max(1, total // runs))
                )
                print(f"rep {rep}: {store} {runs} {name}", file=sys.stderr)
    for store, runs, (name, _) in rows:
        measured = got[store, runs, name]
        median = {k: statistics.median(m[k] for m in measured) for k in measured[0]}
        lines.append(
            f"| {store} | {name} | {runs} | {median['per_s']:,.0f} | "
            f"{median['cpu_ms']:.2f} | {median['syncs']:.2f} |"
        )
    lines.append(f"\nLoad average at end: {os.getloadavg()[0]:.1f}.")
    block = "\n".join(lines) + "\n"
    print(block)
    if args.write:
        write_block(args.write, "group_commit", block, "Group commit: runs in one process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
