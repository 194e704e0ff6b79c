"""What one guarded effect costs on PostgreSQL, against two bare commits on one connection.

    python bench/postgres_effect.py [--quick] [--reps N] [--batch N] [--postgres URL]

In one process, on a fresh schema: batches of guarded ``run.effect`` calls (a no-op tool,
so the ledger's cost is what is measured; the default durability, ``intent``: the intent
waits for its WAL flush, the outcome rides on the next) alternate with batches of the
floor, an INSERT and an UPDATE of a row the size of a step row, each its own autocommit
transaction with ``synchronous_commit = on``. Reported: time per effect and its ratio to
the floor of the same repetition, CPU per effect of this process and of the server (when
it runs here), and the load average. The parts live in ``bench/_workers/effect.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _workers import postgres
from _workers.effect import compare_effect, render_effect
from _workers.stores import postgres_store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="less work (seconds)")
    parser.add_argument("--reps", type=int, help="alternations (default 7, quick 3)")
    parser.add_argument("--batch", type=int, help="effects per batch (default 300, quick 100)")
    parser.add_argument("--postgres", default=postgres.DEFAULT_URL, help="the server")
    args = parser.parse_args(argv)
    facts = postgres.server_facts(args.postgres)
    store = postgres_store(args.postgres, Path(facts["data_directory"]).exists())
    reps, batch = (3, 100) if args.quick else (7, 300)
    reps, batch = args.reps or reps, args.batch or batch
    print(render_effect(compare_effect(store, reps, batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
