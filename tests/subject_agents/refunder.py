"""An agent that refunds one order, as a subprocess the subject tests start and kill.

    python tests/subject_agents/refunder.py LEDGER RUN PROVIDER ORDER [--tool-sleep S]
        [--repeat replay|error] [--no-probe] [--order-json] [--dedupe-window S]
        [--old-subject-text]

One run (id ``RUN``) with one payment, ``refund``, whose subject is ``("refund", ORDER)``:
an HTTP POST to the provider process carrying the idempotency key oncelog hands it. A
probe asks the provider for the effects it performed under the key. It prints the refund's
result as one JSON line and exits through ``oncelog.run_main`` (0 completed, 3 a person
must act, 75 try later). ``--order-json`` reads ORDER as JSON (``42``, ``42.0``, ``"42"``),
so that the subject's order is a number; ``--old-subject-text`` writes the subject as
versions before canonical numbers did (``42.0`` stays ``42.0``), to stand for a ledger an
older version wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse
import urllib.request
from typing import Any

import oncelog


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("ledger", "run", "provider", "order"):
        parser.add_argument(name)
    parser.add_argument("--tool-sleep", type=float, default=0.0)
    parser.add_argument("--repeat", default="replay")
    parser.add_argument("--no-probe", action="store_true", help="an effect in doubt halts")
    parser.add_argument("--order-json", action="store_true", help="ORDER is JSON")
    parser.add_argument("--dedupe-window", type=float, default=None)
    parser.add_argument("--old-subject-text", action="store_true")
    args = parser.parse_args()
    if args.old_subject_text:
        from oncelog.runtime import _subjects

        _subjects._canonical = lambda part: part

    def probe(key: str, step: str, payload: dict[str, Any]) -> oncelog.ProbeAnswer:
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(f"{args.provider}/effects?{query}", timeout=30) as answer:
            found = json.loads(answer.read())["found"]
        if len(found) == 1:
            return oncelog.Found(found[0])
        return oncelog.NOT_FOUND if not found else oncelog.CANNOT_TELL

    @oncelog.tool(
        kind="payment", name="refund", probe=None if args.no_probe else probe,
        repeat=args.repeat, dedupe_window=args.dedupe_window,
        once_per=lambda order, amount: ("refund", order),
    )  # fmt: skip
    def refund(order: str, amount: int, *, idempotency_key: str) -> Any:
        time.sleep(args.tool_sleep)  # widens the window between the intent and the request
        body = {
            "key": idempotency_key, "run": args.run, "payload": {"order": order, "amount": amount},
            "ledger": args.ledger, "pid": os.getpid(),
        }  # fmt: skip
        request = urllib.request.Request(
            args.provider + "/effect", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            result = json.loads(response.read())
        time.sleep(args.tool_sleep)  # ... and the one between the answer and the outcome
        return result

    with oncelog.open(args.ledger) as ledger, ledger.run(args.run) as run:
        order = json.loads(args.order) if args.order_json else args.order
        result = run.effect("refund", refund, order, 10)
    print(json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    oncelog.run_main(main)
