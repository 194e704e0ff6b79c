"""The agent every worker process runs (``oncelog worker _workers.agent:handle``).

A run's input says how many effects to make and how long the provider takes to answer
each (``wait_ms``; 0 is a no-op call, so the ledger's own cost is what is measured). Each
``run.effect`` is timed here, as the agent waits for it, on ``CLOCK_MONOTONIC``, which one
machine's processes share, so the parent can lay every worker's times on one axis.

Only when ``$ONCELOG_BENCH_DIR`` names a folder (the benchmark sets it), importing this
module also:
- opens and closes the ledger at ``$ONCELOG_URL`` once, so that what a first open costs
  (importing the store's driver: psycopg takes a tenth of a second of CPU) is paid before
  the clock starts, not by W processes at once after it;
- writes ``ready-<pid>`` there and waits for a file ``go``, so that W interpreters that took
  a second to start on two cores begin claiming runs together: what is timed is the work;
- at exit writes ``samples-<pid>.json``: the effect times, the real tool calls (their sum
  over the workers must be the number of effects: each happened once), the CPU time the
  process used after ``go``, and its resident memory at ``go`` and at its peak after it
  (read every ``MEMORY_EVERY`` seconds by a thread: the kernel's own peak counts the start).

``handle_async`` is the same agent for ``oncelog worker --concurrency N``: its runs share one
event loop, and the provider's wait is awaited.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import oncelog

FOLDER_ENV = "ONCELOG_BENCH_DIR"
GO_TIMEOUT = 120.0
MEMORY_EVERY = 0.05
BODY = "Hello Alice, your ticket 4711 was resolved; reply to this mail to reopen it. " * 2


class Samples:
    def __init__(self) -> None:
        self.spans: list[tuple[int, int]] = []  # (start, end) of each run.effect, ns
        self.calls = 0
        self.cpu_at_go = 0.0
        self.rss_at_go_kib = 0
        self.rss_peak_kib = 0
        self.in_flight = 0  # async runs inside their handler now, and the most at once
        self.most_in_flight = 1


SAMPLES = Samples()


@oncelog.tool(kind="create", name="send_email")
def send_email(
    to: str, subject: str, body: str, wait_ms: float, *, idempotency_key: str
) -> dict[str, Any]:
    SAMPLES.calls += 1
    if wait_ms:
        time.sleep(wait_ms / 1000)
    return {"id": "msg_" + idempotency_key[-16:], "to": to, "status": "queued"}


def handle(run: oncelog.Run, input: dict[str, Any]) -> None:
    wait_ms = float(input["wait_ms"])
    clock = time.monotonic_ns
    for n in range(int(input["effects"])):
        start = clock()
        run.effect(
            f"email-{n}", send_email, to="alice@example.com", subject=f"ticket {n} resolved",
            body=BODY, wait_ms=wait_ms,
        )  # fmt: skip
        SAMPLES.spans.append((start, clock()))


@oncelog.tool(kind="create", name="send_email")
async def send_email_async(
    to: str, subject: str, body: str, wait_ms: float, *, idempotency_key: str
) -> dict[str, Any]:
    SAMPLES.calls += 1  # on the event loop's one thread
    if wait_ms:
        await asyncio.sleep(wait_ms / 1000)
    return {"id": "msg_" + idempotency_key[-16:], "to": to, "status": "queued"}


async def handle_async(run: oncelog.AsyncRun, input: dict[str, Any]) -> None:
    wait_ms = float(input["wait_ms"])
    clock = time.monotonic_ns
    SAMPLES.in_flight += 1  # the handlers all run on the worker's one event loop
    SAMPLES.most_in_flight = max(SAMPLES.most_in_flight, SAMPLES.in_flight)
    try:
        for n in range(int(input["effects"])):
            start = clock()
            await run.effect(
                f"email-{n}", send_email_async, to="alice@example.com",
                subject=f"ticket {n} resolved", body=BODY, wait_ms=wait_ms,
            )  # fmt: skip
            SAMPLES.spans.append((start, clock()))
    finally:
        SAMPLES.in_flight -= 1


def _resident_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _watch_memory() -> None:
    while True:
        SAMPLES.rss_peak_kib = max(SAMPLES.rss_peak_kib, _resident_kib())
        time.sleep(MEMORY_EVERY)


def _wait_for_go(folder: Path) -> None:
    oncelog.open().close()
    (folder / f"ready-{os.getpid()}").touch()
    go = folder / "go"
    deadline = time.monotonic() + GO_TIMEOUT
    while not go.exists():
        if time.monotonic() > deadline:  # the benchmark is gone: do not linger
            raise SystemExit(f"no {go} after {GO_TIMEOUT:.0f} s")
        time.sleep(0.001)
    SAMPLES.cpu_at_go = time.process_time()
    SAMPLES.rss_at_go_kib = SAMPLES.rss_peak_kib = _resident_kib()
    threading.Thread(target=_watch_memory, name="bench-memory", daemon=True).start()


def _write_samples(folder: Path) -> None:
    data = {
        "spans": SAMPLES.spans,
        "calls": SAMPLES.calls,
        "cpu_seconds": time.process_time() - SAMPLES.cpu_at_go,
        "done_ns": time.monotonic_ns(),
        "rss_at_go_kib": SAMPLES.rss_at_go_kib,
        "max_rss_kib": max(SAMPLES.rss_peak_kib, _resident_kib()),
        "most_in_flight": SAMPLES.most_in_flight,
    }
    (folder / f"samples-{os.getpid()}.json").write_text(json.dumps(data))


if FOLDER_ENV in os.environ:
    _folder = Path(os.environ[FOLDER_ENV])
    atexit.register(_write_samples, _folder)
    _wait_for_go(_folder)
