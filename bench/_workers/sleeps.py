"""The fleet's floor: a bare asyncio loop doing what ``oncelog worker --concurrency N`` does
minus the ledger, N tasks taking runs off one list, each run ``EFFECTS_PER_RUN`` awaited
sleeps of the tool's wait. Run as a process of its own, so its CPU and memory are its own::

    python -m _workers.sleeps IN_FLIGHT RUNS WAIT_MS

It prints one JSON object: the wall seconds, the CPU seconds and the resident KiB at the
start and at the peak.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

from .agent import _resident_kib
from .settings import EFFECTS_PER_RUN


async def work_off(in_flight: int, runs: int, wait_ms: float) -> None:
    left = list(range(runs))

    async def slot() -> None:
        while left:
            left.pop()
            for _ in range(EFFECTS_PER_RUN):
                await asyncio.sleep(wait_ms / 1000)

    await asyncio.gather(*(slot() for _ in range(in_flight)))


def main(argv: list[str]) -> None:
    in_flight, runs, wait_ms = int(argv[0]), int(argv[1]), float(argv[2])
    rss_at_start = _resident_kib()
    cpu, wall = time.process_time(), time.monotonic()
    asyncio.run(work_off(in_flight, runs, wait_ms))
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "rss_kib": [rss_at_start, peak]}))


if __name__ == "__main__":
    main(sys.argv[1:])
