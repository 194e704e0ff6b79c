"""A handler for ``oncelog worker``: ``input`` says how many effects, of which kind, and
how long each takes. The tool is a provider that honours idempotency keys: performing an
effect creates a file named after its key in ``$WORKER_PROVIDER`` (at most once per key,
whoever asks; it holds the pid and the step), and every request is logged there with the
asking pid, so the test reads what happened in the world rather than what the workers
believe. Before acting, a request
writes ``entered-<step>`` so the test can interrupt the worker inside the call.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import oncelog

PROVIDER = Path(os.environ.get("WORKER_PROVIDER", "provider"))


def _provider_call(step: str, seconds: float, key: str) -> dict[str, Any]:
    (PROVIDER / f"entered-{step}").write_text(str(os.getpid()))
    time.sleep(seconds)
    return _provider_answer(step, key)


def _provider_answer(step: str, key: str) -> dict[str, Any]:
    with (PROVIDER / "requests.log").open("a") as log:
        log.write(f"{os.getpid()} {key}\n")
    try:
        fd = os.open(PROVIDER / f"performed-{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return {"key": key, "replayed": True}
    os.write(fd, f"{os.getpid()} {step}".encode())
    os.close(fd)
    return {"key": key, "replayed": False}


@oncelog.tool(kind="create", name="create_thing")
def create_thing(step: str, seconds: float, *, idempotency_key: str) -> dict[str, Any]:
    return _provider_call(step, seconds, idempotency_key)


@oncelog.tool(kind="upsert", name="upsert_thing")
def upsert_thing(step: str, seconds: float, *, idempotency_key: str) -> dict[str, Any]:
    return _provider_call(step, seconds, idempotency_key)


def handle(run: oncelog.Run, input: dict[str, Any]) -> None:
    tool = upsert_thing if input.get("kind") == "upsert" else create_thing
    for n in range(int(input["effects"])):
        run.effect(f"s{n}", tool, f"{run.run_id}-s{n}", float(input.get("seconds", 0.0)))


@oncelog.tool(kind="create", name="create_thing")
async def create_thing_async(step: str, seconds: float, *, idempotency_key: str) -> dict[str, Any]:
    (PROVIDER / f"entered-{step}").write_text(str(os.getpid()))
    await asyncio.sleep(seconds)
    return _provider_answer(step, idempotency_key)


@oncelog.tool(kind="upsert", name="upsert_thing")
async def upsert_thing_async(step: str, seconds: float, *, idempotency_key: str) -> dict[str, Any]:
    (PROVIDER / f"entered-{step}").write_text(str(os.getpid()))
    await asyncio.sleep(seconds)
    return _provider_answer(step, idempotency_key)


async def handle_async(run: oncelog.AsyncRun, input: dict[str, Any]) -> None:
    """``handle`` for an event loop: the provider's wait is awaited, not slept."""
    tool = upsert_thing_async if input.get("kind") == "upsert" else create_thing_async
    for n in range(int(input["effects"])):
        await run.effect(f"s{n}", tool, f"{run.run_id}-s{n}", float(input.get("seconds", 0.0)))
