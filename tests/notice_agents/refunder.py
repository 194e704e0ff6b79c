"""An agent for the link tests of approvals: one ``destructive`` effect (a refund) sent to
the provider process, which needs a person's approval. The run waits in place for it; the
notice goes to HOOK (the ledger's own webhook), its links to ``$ONCELOG_CONSOLE_URL``.
The provider records the refund it performs with the arguments it was called with, so an
edited approval is seen there, not in the ledger.

Usage: refunder.py LEDGER RUN_ID PROVIDER HOOK [--wait S]
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from typing import Any

import oncelog


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("ledger", "run_id", "provider", "hook"):
        parser.add_argument(name)
    parser.add_argument("--wait", type=float, default=None)
    return parser.parse_args()


cfg = parse()


@oncelog.tool(kind="destructive", name="refund")
def refund(amount: int, to: str, *, idempotency_key: str) -> dict[str, Any]:
    body = {"key": idempotency_key, "run": cfg.run_id, "payload": {"amount": amount, "to": to}}
    request = urllib.request.Request(
        cfg.provider + "/effect", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result


def agent() -> None:
    with (
        oncelog.open(cfg.ledger, approval_poll=0.2, alert_webhook=cfg.hook) as ledger,
        ledger.run(cfg.run_id) as run,
    ):
        run.effect("refund", refund, 120, "customer@example.com")
    print("completed", flush=True)


if __name__ == "__main__":
    oncelog.run_main(agent, wait_for_person=cfg.wait)
