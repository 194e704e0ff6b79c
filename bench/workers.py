"""How throughput grows with worker processes, on each store, against its commit floor;
and, with ``--fleet``, with runs in flight in one worker process.

    python bench/workers.py [--quick] [--fleet] [--write docs/benchmarks.md]
                            [--stores sqlite postgresql] [--postgres URL] [--dir DIR] [--keep]

For each store (SQLite: a file; PostgreSQL: a fresh schema), each tool (a no-op provider
call, so the ledger's cost is what is measured, and one that waits 5 ms, to show how
workers overlap waiting) and 1, 2, 4 and 8 workers: runs of 5 effects are submitted
(``ledger.submit``), W ``oncelog worker --until-idle`` processes are started and, once all
have started, let go together; the time until the last one is done gives effects per
second, and every ``run.effect`` timed inside the worker gives p50/p99 latency. Every run
must complete and every effect happen exactly once (checked).

Right before each measurement, the store's floor: one durable commit of a comparable row
on a bare connection (SQLite: WAL, ``synchronous=FULL``; PostgreSQL: ``synchronous_commit
= on``), one writer; results are reported as ratios to it. ``--write`` replaces the block
between this benchmark's markers in the given Markdown file (``_workers/report.py``).

``--fleet`` measures instead one ``oncelog worker --concurrency N`` process holding N runs
whose tool awaits 20 ms, N from 1 to 1,000 (``--quick``: 1 and 8): effects per second, CPU
per effect and memory per run, against a bare asyncio loop doing the same sleeps and against
16 (``--quick``: 4) single-run worker processes (``_workers/inflight.py``).

This file is the entry point; the parts live in ``bench/_workers/``: ``agent`` (what the
worker processes run), ``fleet`` (one measurement), ``cpu`` (CPU time from ``/proc``),
``floor``, ``stores`` and ``postgres``, ``results``, ``suite`` (all in order) and ``report``
(the Markdown). Machine facts and the benchmark folder come from ``bench/overhead.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _workers import inflight, postgres
from _workers.report import render, write_doc
from _workers.settings import FULL, QUICK
from _workers.stores import Store, postgres_store, sqlite_store
from _workers.suite import run_benchmark
from overhead import bench_folder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="less work (< 1 minute)")
    parser.add_argument("--fleet", action="store_true", help="runs in flight in one process")
    parser.add_argument("--write", type=Path, help="update this benchmark's block of this file")
    parser.add_argument(
        "--stores", nargs="+", choices=("sqlite", "postgresql"), default=["sqlite", "postgresql"]
    )
    parser.add_argument(
        "--postgres", default=postgres.DEFAULT_URL, help="the server (a schema is made per run)"
    )
    parser.add_argument("--dir", type=Path, help="where SQLite files go (default /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the SQLite files and logs")
    parser.add_argument("--allow-tmpfs", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - began:5.1f}s] {line}", file=sys.stderr, flush=True)

    facts = postgres.server_facts(args.postgres) if "postgresql" in args.stores else None
    settings = QUICK if args.quick else FULL
    with bench_folder(args.dir, args.keep, args.allow_tmpfs) as folder:
        stores: list[Store] = []
        if "sqlite" in args.stores:
            stores.append(sqlite_store(folder))
        if facts is not None:
            # Its data directory here means the server runs here: its CPU can be read.
            local = Path(facts["data_directory"]).exists()
            stores.append(postgres_store(args.postgres, local))
        if args.fleet:
            fleet_settings = inflight.QUICK if args.quick else inflight.FULL
            fleet = inflight.run_fleet_benchmark(fleet_settings, stores, folder, log)
            block = inflight.render_fleet(fleet)
        else:
            block = render(run_benchmark(settings, stores, facts, folder, log))
    print(block)
    if args.write:
        (inflight.write_fleet_doc if args.fleet else write_doc)(args.write, block)
        log(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
