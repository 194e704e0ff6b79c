"""What one guarded effect, model call and read cost on PostgreSQL, against their floors.

    python bench/postgres_effect.py [--quick] [--reps N] [--batch N] [--postgres URL]
        [--case effect|calls|halt-latency|all] [--baseline TREE] [--latency-reps N]

``effect`` (the default): in one process, on a fresh schema, batches of guarded
``run.effect`` calls (a no-op tool, so the ledger's cost is what is measured; the default
durability, ``intent``: the intent waits for its WAL flush, the outcome rides on the next)
alternate with batches of the floor, an INSERT and an UPDATE of a row the size of a step
row, each its own autocommit transaction with ``synchronous_commit = on``. Reported: time
per effect and its ratio to the floor of the same repetition, CPU per effect of this
process and of the server (when it runs here), and the load average. The parts live in
``bench/_workers/effect.py``.

``calls``: model calls and reads against one bare autocommit round trip, and against the
oncelog of ``--baseline TREE`` (a checkout whose ``src`` holds another oncelog) in the same
run, each tree in a worker process of its own; statements per call counted
(``bench/_workers/calls.py``). ``halt-latency``: how long after a kill switch's commit in
another process a running agent's model calls stop answering from memory
(``bench/_workers/halt_latency.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _workers import postgres
from _workers.calls import compare_calls, render_calls
from _workers.effect import compare_effect, render_effect
from _workers.halt_latency import measure_latency, render_latency
from _workers.stores import postgres_store

TREE = Path(__file__).resolve().parent.parent  # the oncelog measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="less work (seconds)")
    parser.add_argument("--reps", type=int, help="alternations (default 7, quick 3)")
    parser.add_argument("--batch", type=int, help="calls per batch (default 300, quick 100)")
    parser.add_argument("--postgres", default=postgres.DEFAULT_URL, help="the server")
    parser.add_argument(
        "--case", choices=("effect", "calls", "halt-latency", "all"), default="effect"
    )
    parser.add_argument("--baseline", type=Path, help="calls: another tree to compare with")
    parser.add_argument("--latency-reps", type=int, default=50, help="halts set (default 50)")
    args = parser.parse_args(argv)
    facts = postgres.server_facts(args.postgres)
    store = postgres_store(args.postgres, Path(facts["data_directory"]).exists())
    reps, batch = (3, 100) if args.quick else (7, 300)
    reps, batch = args.reps or reps, args.batch or batch
    cases = ("effect", "calls", "halt-latency") if args.case == "all" else (args.case,)
    if "effect" in cases:
        print(render_effect(compare_effect(store, reps, batch)), end="\n\n")
    if "calls" in cases:
        trees = [("this tree", TREE)]
        if args.baseline is not None:
            trees.insert(0, ("baseline", args.baseline))
        print(render_calls(compare_calls(store, trees, reps, batch)), end="\n\n")
    if "halt-latency" in cases:
        print(render_latency(measure_latency(store, args.latency_reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
