"""A DBOS workflow whose receipt goes out once, however its process dies.

    pip install '.[dbos]'
    python app.py order-1

DBOS keeps its state in dbos.sqlite, oncelog in .oncelog/ledger.db. The receipt
"provider" appends to outbox.jsonl with the idempotency key oncelog derived; the probe
looks the key up there, as a real one would ask the provider's API.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

import oncelog
from oncelog.integrations import dbos as oncelog_dbos

OUTBOX = Path("outbox.jsonl")
ledger = oncelog.open()


def find_receipt(key: str, order: str) -> oncelog.ProbeAnswer:
    """Did the provider send it? Asked only when a process died in the middle of the call."""
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


@DBOS.step(retries_allowed=True, should_retry=oncelog_dbos.should_retry)
def send_step(order: str) -> dict[str, Any]:
    with oncelog_dbos.run(ledger) as run:  # run id: <workflow id>/step-<n>
        sent: dict[str, Any] = run.effect("send", send_receipt, order)
        return sent


@DBOS.workflow()
def receipt_workflow(order: str) -> dict[str, Any]:
    return send_step(order)


if __name__ == "__main__":
    order = sys.argv[1]
    DBOS(config={"name": "receipts", "system_database_url": "sqlite:///dbos.sqlite"})
    DBOS.launch()  # recovers the workflows a killed process left pending
    with SetWorkflowID(f"receipt-{order}"):  # started again, the same id is the same workflow
        handle = DBOS.start_workflow(receipt_workflow, order)
    print(handle.get_result())
    DBOS.destroy()
