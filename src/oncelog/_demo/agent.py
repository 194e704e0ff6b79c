"""The support agent of the demo: classify a ticket, email the customer, close the ticket.

``python -m oncelog._demo.agent plain|guarded LEDGER MAILER_URL TICKET``. The plain agent
keeps its progress in memory, as most agents do; the guarded one records it in oncelog.
With ``DEMO_KILL_AFTER_EMAIL=1`` the plain agent dies right after the email is accepted,
which is what ``ONCELOG_CRASH_AT`` does to the guarded one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from typing import Any

import oncelog


def post(url: str, payload: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(url, json.dumps(payload).encode(), headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


def classify(ticket: str) -> dict[str, Any]:
    """A stand-in for a model call: deterministic, with the usage a real one reports."""
    return {"label": "refund", "usage": {"prompt_tokens": 412, "completion_tokens": 9}}


def plain(mailer: str, ticket: str) -> None:
    label = classify(ticket)["label"]
    post(f"{mailer}/emails", {"to": "customer@example.com", "subject": f"{ticket}: {label}"})
    if os.environ.get("DEMO_KILL_AFTER_EMAIL"):
        os.kill(os.getpid(), signal.SIGKILL)


def guarded(ledger_path: str, mailer: str, ticket: str) -> None:
    ledger = oncelog.open(ledger_path)

    @ledger.tool(kind="create", name="send_email")
    def send_email(to: str, subject: str, *, idempotency_key: str) -> dict[str, Any]:
        return post(f"{mailer}/emails", {"to": to, "subject": subject}, key=idempotency_key)

    with ledger.run(ticket, plan=["classify", "email"]) as run:
        label = run.llm("classify", classify, ticket)["label"]
        run.effect("email", send_email, to="customer@example.com", subject=f"{ticket}: {label}")


def main() -> None:
    mode, ledger_path, mailer, ticket = sys.argv[1:5]
    if mode == "plain":
        plain(mailer, ticket)
    else:
        oncelog.run_main(lambda: guarded(ledger_path, mailer, ticket))


if __name__ == "__main__":
    main()
