"""A Temporal worker for the workflow of ``temporal_workflow.py`` and the activity of
``temporal_activity.py``, on a real (local development) Temporal server.

    python -m tests.engine_agents.temporal_worker ADDRESS TASK_QUEUE

Prints ``READY`` once it polls; the ledger is ``$ONCELOG_URL``.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

from .temporal_activity import send_order
from .temporal_workflow import OrderWorkflow


async def main(address: str, task_queue: str) -> None:
    client = await Client.connect(address)
    with ThreadPoolExecutor(max_workers=4) as executor:
        worker = Worker(
            client, task_queue=task_queue, workflows=[OrderWorkflow], activities=[send_order],
            activity_executor=executor,
        )  # fmt: skip
        async with worker:
            print("READY", flush=True)
            await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
