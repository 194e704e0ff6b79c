"""The worker, and the starter of one workflow.

pip install '.[temporal]'
temporal server start-dev                      # or any Temporal server
python worker.py                               # runs activities and the workflow
python worker.py start order-1                 # starts the workflow, prints its result
"""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from activities import ReceiptWorkflow, receipt
from temporalio.client import Client
from temporalio.worker import Worker

ADDRESS = os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233")
QUEUE = os.environ.get("TEMPORAL_QUEUE", "receipts")


async def work() -> None:
    client = await Client.connect(ADDRESS)
    with ThreadPoolExecutor(max_workers=4) as executor:
        worker = Worker(
            client, task_queue=QUEUE, workflows=[ReceiptWorkflow], activities=[receipt],
            activity_executor=executor,
        )  # fmt: skip
        print("worker ready", flush=True)
        await worker.run()


async def start(order: str) -> None:
    client = await Client.connect(ADDRESS)
    result = await client.execute_workflow(
        ReceiptWorkflow.run, order, id=f"receipt-{order}", task_queue=QUEUE
    )
    print(result)


if __name__ == "__main__":
    if sys.argv[1:2] != ["start"]:
        asyncio.run(work())
    asyncio.run(start(sys.argv[2]))
    # Seen with temporalio 1.35: the SDK's runtime threads can abort the interpreter's
    # finalization (SIGABRT after the result was printed); leave without it.
    sys.stdout.flush()
    os._exit(0)
