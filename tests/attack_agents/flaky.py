"""An agent with one effect, for the attack tests: its tool writes ``TIME KEY`` to a tries
file before anything else, so a test reads every attempt that reached the provider and
when, whatever the ledger says.

Usage: flaky.py LEDGER RUN_ID TRIES [--kind K] [--approval] [--fail-first N --backoff S]
       [--dedupe-window S] [--cost C --budget B]

``--fail-first N`` makes the first N attempts (counted in the tries file) fail with an
error classified ``NOT_PERFORMED``, under a retry policy of 3 attempts ``--backoff``
seconds apart without jitter. ``--cost`` is what each attempt costs, ``--budget`` the
run's limit of cost (``on_exceed="stop"``). It prints the effect's result as one JSON line and exits
through ``oncelog.run_main`` (3 halted, 4 waiting for a person).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import oncelog
from oncelog.failures import Failure


class NotSent(Exception):
    """The provider refused the connection: certainly not performed."""


def classify(error: BaseException) -> Failure | None:
    return Failure.NOT_PERFORMED if isinstance(error, NotSent) else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("tries", type=Path)
    parser.add_argument("--kind", default="payment")
    parser.add_argument("--approval", action="store_true")
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--backoff", type=float, default=0.0)
    parser.add_argument("--dedupe-window", type=float, default=None)
    parser.add_argument("--cost", type=float, default=None)
    parser.add_argument("--budget", type=float, default=None)
    options = parser.parse_args()
    ledger = oncelog.open(options.ledger)
    retrying = options.fail_first > 0
    window = options.dedupe_window

    @ledger.tool(
        kind=options.kind, name="charge", approval=options.approval,
        failures=classify if retrying else None,
        retry=oncelog.Retry(3, options.backoff, jitter=0.0) if retrying else None,
        dedupe_window=None if window is None else timedelta(seconds=window),
        cost=options.cost or 0.0,
    )  # fmt: skip
    def charge(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        with options.tries.open("a") as tries:
            tries.write(f"{time.time()!r} {idempotency_key}\n")
        if len(options.tries.read_text().splitlines()) <= options.fail_first:
            raise NotSent("connection refused")
        return {"charged": amount, "key": idempotency_key}

    def agent() -> None:
        limit = None if options.budget is None else oncelog.Budget(cost=options.budget)
        with ledger.run(options.run_id, budget=limit) as run:
            print(json.dumps(run.effect("charge", charge, 100)), flush=True)

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
