"""The shop the crashtest agents work for, and its provider's own records.

The provider is a JSON-lines file (``$CRASHTEST_PROVIDER``): every effect the agent
performs appends one line with its tool and idempotency key, the way a provider keeps
its own records whatever the agent's ledger says. An append survives the SIGKILL that
follows it, so the test counts what really happened from this file.

The provider ignores idempotency keys: a call sent again with the same key is performed
again. ``count`` prints how many times it performed each tool, as ``crashtest --count``
reads it.

Each agent module is this shop's ``main`` with at most one thing changed: where its run id
comes from, how it names its steps, the kind or the dedupe window it declares for
``open_ticket``, or an approval its charge waits for. Run one
as ``python -m tests.crashtest_agents.NAME`` from the repository's root.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import oncelog

PROVIDER_ENV = "CRASHTEST_PROVIDER"
PLAN = ("triage", "open_ticket", "charge", "set_status")


def perform(tool: str, key: str, **payload: Any) -> dict[str, Any]:
    with open(os.environ[PROVIDER_ENV], "a", encoding="utf-8") as records:
        records.write(json.dumps({"tool": tool, "key": key, **payload}) + "\n")
    return {"id": f"{tool}-{key[-8:]}"}


def performed(key: str) -> list[dict[str, Any]]:
    with open(os.environ[PROVIDER_ENV], encoding="utf-8") as records:
        return [line for line in map(json.loads, records) if line["key"] == key]


def find_charge(key: str, customer: str, cents: int) -> oncelog.ProbeAnswer:
    """The payment provider can be asked about a key: the charge's probe."""
    found = performed(key)
    return oncelog.Found({"id": f"charge-{key[-8:]}"}) if found else oncelog.NOT_FOUND


def classify(message: str) -> dict[str, Any]:
    return {"label": "refund", "usage": {"prompt_tokens": 12, "completion_tokens": 1}}


def main(
    run_id: str,
    *,
    name: Callable[[str], str] = str,
    plan: tuple[str, ...] | None = PLAN,
    ticket_kind: oncelog.Kind = oncelog.Kind.CREATE,
    ticket_window: float | None = None,
    charge_approval: bool = False,
) -> None:
    ledger = oncelog.open()  # $ONCELOG_URL: crashtest gives each trial its own ledger

    @ledger.tool(kind=ticket_kind, name="open_ticket", dedupe_window=ticket_window)
    def open_ticket(customer: str, subject: str, *, idempotency_key: str) -> dict[str, Any]:
        return perform("open_ticket", idempotency_key, customer=customer, subject=subject)

    @ledger.tool(kind="payment", name="charge", probe=find_charge, approval=charge_approval)
    def charge(customer: str, cents: int, *, idempotency_key: str) -> dict[str, Any]:
        return perform("charge", idempotency_key, customer=customer, cents=cents)

    @ledger.tool(kind="upsert", name="set_status")
    def set_status(ticket: str, status: str, *, idempotency_key: str) -> dict[str, Any]:
        return perform("set_status", idempotency_key, ticket=ticket, status=status)

    def agent() -> None:
        with ledger.run(run_id, plan=plan) as run:
            label = run.llm(name("triage"), classify, "please refund me")["label"]
            ticket = run.effect(name("open_ticket"), open_ticket, "cus_1", label)
            run.effect(name("charge"), charge, "cus_1", 500)
            run.effect(name("set_status"), set_status, ticket["id"], "solved")

    oncelog.run_main(agent)


def count() -> None:
    """Print how many times the provider performed each tool, as JSON."""
    with open(os.environ[PROVIDER_ENV], encoding="utf-8") as records:
        print(json.dumps(Counter(line["tool"] for line in map(json.loads, records))))
