"""A Celery task whose receipt goes out once, however its worker dies.

    pip install '.[celery]'
    celery -A tasks worker --pool=solo -l info
    python tasks.py order-1

The receipt "provider" appends to outbox.jsonl with the idempotency key oncelog derived;
the probe looks the key up there, as a real one would ask the provider's API.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from celery import Celery

import oncelog
from oncelog.integrations.celery import once_task

OUTBOX = Path("outbox.jsonl")

app = Celery("receipts", broker=os.environ.get("CELERY_BROKER", "amqp://guest:guest@127.0.0.1//"))
app.conf.update(
    task_default_queue=os.environ.get("CELERY_QUEUE", "receipts"),
    worker_prefetch_multiplier=1,  # hold no message that is not being worked on
    broker_connection_retry_on_startup=True,
    # On Redis: redeliver an unacknowledged message after 5 minutes, not the default hour,
    # and look for them every 10 s; keep it longer than any task takes.
    broker_transport_options={
        "visibility_timeout": 300,
        "unacked_restore_interval": 10,
        "unacked_restore_throttle": 1,
    },
)


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


@once_task(app, oncelog.open, run_id=lambda order: f"receipt-{order}", name="receipts.receipt")
def receipt(run: oncelog.Run, order: str) -> dict[str, Any]:
    sent: dict[str, Any] = run.effect("send", send_receipt, order)
    return sent


if __name__ == "__main__":
    receipt.delay(sys.argv[1])
