"""What a guarded effect costs, measured against the physical floor in the same run.

    python bench/overhead.py [--quick] [--write docs/benchmarks.md] [--dir DIR] [--keep]

The physical floor of an effect is two commits (the intent before the call, the outcome
after it), fsynced as its durability mode promises. This script measures, in one process
and on one disk:

1. effects: a guarded ``run.effect`` against the bare tool call and against its floor (a raw
   ``sqlite3`` connection, WAL, doing one INSERT and one UPDATE of a comparable row, each
   in its own committed transaction): for durability ``intent`` the INSERT's commit
   fsynced and the UPDATE's not, for ``full`` both (``synchronous=FULL``), for
   ``process`` neither (``synchronous=NORMAL``). Batches of each variant alternate, repeated, so
   the drift of a noisy machine hits all variants alike; the medians over repetitions are
   reported. Then where the guarded path spends its time: per SQL statement, WAL pages
   written, and a cProfile of the Python side.
2. resume: re-entering a recorded run and replaying every step, 20 and 10,000 steps,
   against a raw SELECT of the same rows and against that SELECT plus two durable commits.
3. memory: peak memory (tracemalloc, and resident size, each in a fresh subprocess per
   size) while replaying 1,000 / 10,000 / 100,000 recorded steps, next to a reader that loads
   all the run's steps at once (``ledger.steps``), to show that replay memory stays flat.

Results are ratios against baselines measured in the same run: the machine is noisy, so
nothing here is a timed assertion. ``--write`` replaces the generated block of the given
Markdown file (between the markers in ``_overhead/report.py``) and keeps the prose around it.

This file is the entry point; the measurements live in ``bench/_overhead/``: ``machine``
(the facts printed first), ``floor`` and ``effects`` (1), ``breakdown`` and ``profiling``
(where the time goes), ``recording`` and ``resume`` (2), ``memory`` (3, and the ``--child``
mode this script is re-invoked in), ``suite`` (all in order) and ``report`` (the Markdown).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The measurements live in bench/_overhead/ (importable: this script's folder is on sys.path).
from _overhead.machine import mount_of
from _overhead.memory import child_main
from _overhead.report import render, write_doc
from _overhead.settings import FULL, QUICK
from _overhead.suite import run_benchmark


@contextmanager
def bench_folder(base: Path | None, keep: bool, allow_tmpfs: bool) -> Iterator[Path]:
    root = base or Path("/var/tmp")
    fstype = mount_of(root)[1]
    if fstype in ("tmpfs", "ramfs") and not allow_tmpfs:
        raise SystemExit(
            f"{root} is on {fstype}: fsync costs nothing there, so the floor means nothing. "
            "Pick a directory on a real disk with --dir (or pass --allow-tmpfs)."
        )
    folder = Path(tempfile.mkdtemp(prefix="oncelog-bench-", dir=root))
    try:
        yield folder
    finally:
        if keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 1 minute)")
    parser.add_argument("--write", type=Path, help="update the results block of this file")
    parser.add_argument("--dir", type=Path, help="where the databases go (default /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--allow-tmpfs", action="store_true", help=argparse.SUPPRESS)
    # The memory measurements re-invoke this script, one fresh process per number.
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child)

    began = time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - began:5.1f}s] {line}", file=sys.stderr, flush=True)

    settings = QUICK if args.quick else FULL
    with bench_folder(args.dir, args.keep, args.allow_tmpfs) as folder:
        report = run_benchmark(settings, folder, log)
    block = render(report)
    print(block)
    if args.write:
        write_doc(args.write, block)
        log(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
