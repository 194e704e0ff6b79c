"""Memory while replaying: each number from a fresh child process (the entry script
re-invoked with ``--child``), replaying a recorded run or loading all its steps at once."""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog.records._records import ReplayPage
from oncelog.stores import Store

from .settings import Log
from .workload import open_guarded, replay

# The children run the entry script, so they import exactly what the parent did.
ENTRY_SCRIPT = Path(__file__).resolve().parent.parent / "overhead.py"
CHILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class MemoryResult:
    steps: int
    record_seconds: float
    replay: dict[str, Any]  # the child run under tracemalloc
    replay_rss: dict[str, Any]  # the same without tracemalloc: VmRSS / VmHWM
    load_all: dict[str, Any]
    load_all_rss: dict[str, Any]


def proc_status_kib(field_name: str) -> int:
    """A ``/proc/self/status`` memory field (VmRSS, VmHWM) in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def count_pages(store: Store, method: str) -> list[int]:
    """Wrap ``store.<method>`` (``replay_page``: what replay reads; ``steps``: what
    ``ledger.steps`` reads) to record the size of every page of steps it reads."""
    pages: list[int] = []
    read_page = getattr(store, method)

    def counting(run: str, from_seq: int, bound: int) -> Any:
        rows = read_page(run, from_seq, bound)
        pages.append(rows.steps if isinstance(rows, ReplayPage) else len(rows))
        return rows

    setattr(store, method, counting)
    return pages


def child_measure(db: str, run_id: str, steps: int, what: str, measure: str) -> dict[str, Any]:
    """In a fresh process: replay ``run_id`` (or load all its steps) and report memory.

    RSS is read from ``VmRSS`` / ``VmHWM`` (this process's own peak). ``ru_maxrss`` is
    reported too but is not used: on Linux it keeps, across ``exec``, the resident size of
    the forked copy of the parent, so a child of a big parent starts with a big peak."""
    ledger, tool = open_guarded(db)
    pages = count_pages(ledger.store, "replay_page" if what == "replay" else "steps")
    gc.collect()
    rss_before = proc_status_kib("VmRSS")
    hwm_before = proc_status_kib("VmHWM")
    if measure == "tracemalloc":
        tracemalloc.start()
    start = time.perf_counter()
    if what == "replay":
        replay(ledger, tool, run_id, steps)
    else:
        loaded = ledger.steps(run_id)
        if len(loaded) != steps:
            raise RuntimeError(f"{run_id}: {len(loaded)} steps recorded, expected {steps}")
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] if measure == "tracemalloc" else None
    hwm_after = proc_status_kib("VmHWM")
    ledger.close()
    return {
        "steps": steps,
        "what": what,
        "measure": measure,
        "seconds": seconds,
        "tracemalloc_peak": peak,
        "rss_before_kib": rss_before,
        "hwm_before_kib": hwm_before,
        "hwm_after_kib": hwm_after,
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "pages": len(pages),
        "largest_page": max(pages, default=0),
        "tool_calls": tool.calls,
    }


def child_main(spec: str) -> int:
    """The ``--child`` mode: measure as ``spec`` (JSON) says, print the result as JSON."""
    db, run_id, steps, what, measure = json.loads(spec)
    print(json.dumps(child_measure(db, run_id, int(steps), what, measure)))
    return 0


def spawn_child(db: Path, run_id: str, steps: int, what: str, measure: str) -> dict[str, Any]:
    spec = json.dumps([str(db), run_id, steps, what, measure])
    command = [sys.executable, str(ENTRY_SCRIPT), "--child", spec]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {what}/{measure} {steps} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["tool_calls"] != 0:
        raise RuntimeError(f"child {what} {steps}: the tool was called {result['tool_calls']}x")
    return result


def measure_memory(
    path: Path, sizes: tuple[int, ...], record_seconds: dict[int, float], log: Log
) -> list[MemoryResult]:
    out = []
    for steps in sizes:
        run_id = f"steps-{steps}"
        children = {
            (what, measure): spawn_child(path, run_id, steps, what, measure)
            for what in ("replay", "load_all")
            for measure in ("tracemalloc", "rss")
        }
        log(
            f"  {steps} steps: "
            + ", ".join(f"{w}/{m} {c['seconds']:.1f}s" for (w, m), c in children.items())
        )
        out.append(
            MemoryResult(
                steps=steps,
                record_seconds=record_seconds[steps],
                replay=children["replay", "tracemalloc"],
                replay_rss=children["replay", "rss"],
                load_all=children["load_all", "tracemalloc"],
                load_all_rss=children["load_all", "rss"],
            )
        )
    return out
