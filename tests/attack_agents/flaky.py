"""An agent with one effect, for the attack tests: its tool writes ``TIME KEY`` to a tries
file before anything else, so a test reads every attempt that reached the provider and
when, whatever the ledger says.

Usage: flaky.py LEDGER RUN_ID TRIES [--kind K] [--approval] [--fail-first N --backoff S]
       [--dedupe-window S] [--lose-answer N] [--not-sent-try N] [--probe] [--cost C --budget B]
       [--store-timeout S] [--hold FILE] [--run-id-from-env]

``--fail-first N`` makes the first N attempts (counted in the tries file) fail with an
error classified ``NOT_PERFORMED``, under a retry policy of 3 attempts ``--backoff``
seconds apart without jitter; ``--not-sent-try N`` makes the Nth attempt alone fail so
(classified, with no retry policy). ``--lose-answer N`` makes the first N attempts perform
and then lose their answer (an unclassified error: in doubt); ``--probe`` declares a probe
that finds a key in the tries file. ``--cost`` is what each attempt costs, ``--budget`` the
run's limit of cost (``on_exceed="stop"``). ``--hold`` keeps the tool inside the provider,
after its try is written, until the file exists. It prints the effect's result as one
JSON line and exits through ``oncelog.run_main`` (3 halted, 4 waiting for a person, 75
try later).
"""

from __future__ import annotations

import argparse
import json
import os
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


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("tries", type=Path)
    parser.add_argument("--kind", default="payment")
    parser.add_argument("--approval", action="store_true")
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--backoff", type=float, default=0.0)
    parser.add_argument("--dedupe-window", type=float, default=None)
    parser.add_argument("--lose-answer", type=int, default=0)
    parser.add_argument("--not-sent-try", type=int, default=0)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--cost", type=float, default=None)
    parser.add_argument("--budget", type=float, default=None)
    parser.add_argument("--store-timeout", type=float, default=None)
    parser.add_argument("--hold", type=Path, help="the tool returns once this file exists")
    parser.add_argument("--run-id-from-env", action="store_true", help="$ONCELOG_RUN_ID")
    return parser.parse_args()


def probe_tries(tries: Path) -> oncelog.Probe:
    """A probe that asks the provider's record: found once a try with the key was made."""

    def probe(key: str, amount: int) -> oncelog.ProbeAnswer:
        made = tries.read_text().split() if tries.exists() else []
        return oncelog.Found({"charged": amount, "key": key}) if key in made else oncelog.NOT_FOUND

    return probe


def charge_tool(ledger: oncelog.Ledger, options: argparse.Namespace) -> oncelog.Tool[..., Any]:
    retrying = options.fail_first > 0
    window = options.dedupe_window

    @ledger.tool(
        kind=options.kind, name="charge", approval=options.approval,
        failures=classify if retrying or options.not_sent_try else None,
        retry=oncelog.Retry(3, options.backoff, jitter=0.0) if retrying else None,
        dedupe_window=None if window is None else timedelta(seconds=window),
        cost=options.cost or 0.0, probe=probe_tries(options.tries) if options.probe else None,
    )  # fmt: skip
    def charge(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        with options.tries.open("a") as tries:
            tries.write(f"{time.time()!r} {idempotency_key}\n")
        while options.hold is not None and not options.hold.exists():
            time.sleep(0.01)
        made = len(options.tries.read_text().splitlines())
        if made <= options.fail_first or made == options.not_sent_try:
            raise NotSent("connection refused")
        if made <= options.lose_answer:
            raise ConnectionResetError("the connection dropped before the answer")
        return {"charged": amount, "key": idempotency_key}

    return charge


def agent(options: argparse.Namespace) -> None:
    # The ledger is opened inside run_main, so a store that cannot be used at start
    # exits 75 too (opened before it, StoreUnavailable would end the process with 1).
    with oncelog.open(options.ledger, store_timeout=options.store_timeout) as ledger:
        charge = charge_tool(ledger, options)
        limit = None if options.budget is None else oncelog.Budget(cost=options.budget)
        # An id no command line carries whole (a leading dash) comes from the environment.
        run_id = os.environ["ONCELOG_RUN_ID"] if options.run_id_from_env else options.run_id
        with ledger.run(run_id, budget=limit) as run:
            # A person's ``done --no-result`` is printed as null: NO_RESULT is no JSON.
            got = run.effect("charge", charge, 100)
            print(json.dumps(None if got is oncelog.NO_RESULT else got), flush=True)


if __name__ == "__main__":
    parsed = parse()
    oncelog.run_main(lambda: agent(parsed))
