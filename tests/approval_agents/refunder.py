"""An agent with one refund that needs a person's approval over 100, for the approval
policy and edit tests.

    python tests/approval_agents/refunder.py LEDGER RUN PROVIDER ORDER AMOUNT
        [--approval-expires S] [--dedupe-window S] [--subject]

The refund is an HTTP POST to the provider process (``tests/support/provider.py``), which
records what it performed: the tests count there. The tool takes ``order`` and ``amount``
and needs approval when ``amount > 100`` (``--subject``: its subject is the order). The
agent prints the refund's result as one JSON line and exits through ``oncelog.run_main``
(0 completed, 4 waiting for a person).
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.request
from typing import Any

import oncelog


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("ledger", "run", "provider", "order"):
        parser.add_argument(name)
    parser.add_argument("amount", type=int)
    parser.add_argument("--approval-expires", type=float, default=None)
    parser.add_argument("--dedupe-window", type=float, default=None)
    parser.add_argument("--subject", action="store_true")
    args = parser.parse_args()

    @oncelog.tool(
        kind="payment", name="refund", dedupe_window=args.dedupe_window,
        once_per=(lambda order, amount: ("refund", order)) if args.subject else None,
        approval=lambda order, amount: amount > 100,
        approval_expires=args.approval_expires,
    )  # fmt: skip
    def refund(order: str, amount: int, *, idempotency_key: str) -> Any:
        body = {
            "key": idempotency_key, "run": args.run, "payload": {"order": order, "amount": amount},
            "ledger": args.ledger, "pid": os.getpid(),
        }  # fmt: skip
        request = urllib.request.Request(
            args.provider + "/effect", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        return {"order": order, "amount": amount, "provider": answer}

    with oncelog.open(args.ledger) as ledger, ledger.run(args.run) as run:
        result = run.effect("refund", refund, args.order, args.amount)
    print(json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    oncelog.run_main(main)
