"""The workflow of the Temporal server test: one activity, retried quickly after a worker
died (its start-to-close timeout is short). It names the activity by its name, so the
workflow sandbox imports nothing of oncelog."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy


@workflow.defn
class OrderWorkflow:
    @workflow.run
    async def run(self, order: str, probe: bool) -> Any:
        return await workflow.execute_activity(
            "send_order",
            args=[order, probe],
            start_to_close_timeout=timedelta(seconds=4),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)),
        )
