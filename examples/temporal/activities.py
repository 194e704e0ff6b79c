"""A Temporal activity whose receipt goes out once, across retries and dead workers, and
the workflow that calls it.

The receipt "provider" appends to outbox.jsonl with the idempotency key oncelog derived;
the probe looks the key up there, as a real one would ask the provider's API.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import oncelog
    from oncelog.integrations import temporal as oncelog_temporal

OUTBOX = Path("outbox.jsonl")


def find_receipt(key: str, order: str) -> oncelog.ProbeAnswer:
    """Did the provider send it? Asked only when a worker died in the middle of the call."""
    if OUTBOX.exists():
        for line in OUTBOX.read_text().splitlines():
            if json.loads(line)["key"] == key:
                return oncelog.Found(json.loads(line))
    return oncelog.NOT_FOUND


@oncelog.tool(kind="create", probe=find_receipt)
def send_receipt(order: str, *, idempotency_key: str) -> dict[str, Any]:
    sent = {"key": idempotency_key, "order": order}
    with OUTBOX.open("a") as out:
        out.write(json.dumps(sent) + "\n")
    return sent


@activity.defn
def receipt(order: str) -> dict[str, Any]:
    ledger = oncelog.open()  # one per call keeps the example short; open one per worker
    with ledger, oncelog_temporal.run(ledger) as run:  # run id: <workflow id>/<activity id>
        sent: dict[str, Any] = run.effect("send", send_receipt, order)
        return sent


@workflow.defn
class ReceiptWorkflow:
    @workflow.run
    async def run(self, order: str) -> dict[str, Any]:
        # A short start-to-close timeout: a dead worker's attempt is retried soon.
        return await workflow.execute_activity(
            receipt, order, start_to_close_timeout=timedelta(seconds=10)
        )
