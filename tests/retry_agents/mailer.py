"""The on-call dead end of issue 33: a customer is charged, then the email service refuses
connections for longer than the email's retry policy waits, so the run ends
``EffectRefused: not performed in 3 attempts``. Each tool posts to a provider process
(``support/provider.py``), which counts what it performed; the email's address is given
apart, so that a test can point it at a port nobody listens on (refused connections).

Usage: mailer.py LEDGER RUN_ID PROVIDER EMAIL_SERVICE

Exits through ``oncelog.run_main``: 0 completed, 3 an effect refused (a person retries it).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

import oncelog
from oncelog.failures import urllib as urllib_failures


def post(url: str, run_id: str, tool: str, payload: Any, key: str) -> Any:
    body = {"key": key, "run": run_id, "payload": {"tool": tool, "value": payload}}
    request = urllib.request.Request(
        url + "/effect", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def main() -> None:
    ledger_url, run_id, provider, email_service = sys.argv[1:5]
    ledger = oncelog.open(ledger_url)

    @ledger.tool(kind="payment", name="charge")
    def charge(cents: int, *, idempotency_key: str) -> Any:
        return post(provider, run_id, "charge", cents, idempotency_key)

    @ledger.tool(
        kind="create",
        name="send_email",
        failures=urllib_failures.classify,
        retry=oncelog.Retry(attempts=3, backoff=0.01, jitter=0),
    )
    def send_email(to: str, *, idempotency_key: str) -> Any:
        return post(email_service, run_id, "send_email", to, idempotency_key)

    def agent() -> None:
        with ledger.run(run_id) as run:
            run.effect("charge", charge, 1200)
            run.effect("email", send_email, "ada@example.com")

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
