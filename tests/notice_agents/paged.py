"""An agent whose run stops for a person, for the notice tests: one ``payment`` effect
whose preflight answers a conflict (the provider says someone else refunded it), and whose
call appends its idempotency key to PERFORMED. The ledger's ``alert_webhook`` is WEBHOOK. A
kill switch set beforehand halts it before its preflight. It exits through
``oncelog.run_main``.

Usage: paged.py LEDGER RUN_ID WEBHOOK PERFORMED
"""

from __future__ import annotations

import sys
from pathlib import Path

import oncelog


def preflight(key: str, cents: int) -> oncelog.PreflightAnswer:
    return oncelog.Conflict("the provider says order 7 was refunded by someone else")


@oncelog.tool(kind="payment", name="refund", preflight=preflight)
def refund(cents: int, *, idempotency_key: str) -> str:
    with Path(sys.argv[4]).open("a") as out:
        out.write(f"{idempotency_key}\n")
    return "refunded"


def agent() -> None:
    ledger_url, run_id, webhook = sys.argv[1:4]
    with (
        oncelog.open(ledger_url, alert_webhook=webhook) as ledger,
        ledger.run(run_id) as run,
    ):
        run.effect("refund", refund, 500)


if __name__ == "__main__":
    oncelog.run_main(agent)
