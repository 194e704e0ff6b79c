"""The handler of ``oncelog consume`` in the queue tests: the workers' handler (a provider
that honours idempotency keys and keeps its own records in ``$WORKER_PROVIDER``), which
first writes one line per call to ``handled.log`` there, so a test can count how often a
message reached a handler, and raises on a ``poison`` input, as a handler with a bug would.
"""

from __future__ import annotations

import os
from typing import Any

import oncelog

from ..worker_agents import handlers as worker


def handle(run: oncelog.Run, input: dict[str, Any]) -> None:
    with (worker.PROVIDER / "handled.log").open("a") as log:
        log.write(f"{os.getpid()} {run.run_id}\n")
    if input.get("poison"):
        raise ValueError("this handler cannot handle a poison message")
    worker.handle(run, input)


async def handle_async(run: oncelog.AsyncRun, input: dict[str, Any]) -> None:
    """``handle`` for an event loop (the provider's wait awaited)."""
    with (worker.PROVIDER / "handled.log").open("a") as log:
        log.write(f"{os.getpid()} {run.run_id}\n")
    await worker.handle_async(run, input)
