"""A process that makes model calls and reads on a PostgreSQL ledger when its parent
(``bench/_workers/calls.py``) says so, with the oncelog its ``PYTHONPATH`` names: the tree
measured, or the one compared with. One JSON line in (``{"kind": "llm", "count": N}``),
one out: each call's nanoseconds, the process's CPU seconds, and the statements sent to
the server by the calls (this thread) and by any other thread (the kill switches'
listener), counted at ``psycopg.Cursor.execute``, through which every statement goes.

    python calls_worker.py URL
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

import oncelog

WARM_UP = 30  # calls of each kind before the parent's clock starts (statements prepared)
_MAIN = threading.main_thread()
_counted = {"calls": 0, "other": 0}


def _counting(execute: Callable[..., Any]) -> Callable[..., Any]:
    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _counted["calls" if threading.current_thread() is _MAIN else "other"] += 1
        return execute(self, *args, **kwargs)

    return counted


psycopg.Cursor.execute = _counting(psycopg.Cursor.execute)  # type: ignore[method-assign]


def _ask() -> dict[str, Any]:
    return {"text": "ok", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}


def _look(ticket: int) -> dict[str, Any]:
    return {"ticket": ticket, "status": "open"}


def main(url: str) -> int:
    with oncelog.open(url, lease_ttl=3600) as ledger, ledger.run("calls", agent="bench") as run:
        steps = iter(range(1 << 62))

        def call(kind: str) -> None:
            n = next(steps)
            if kind == "llm":
                run.llm(f"ask-{n}", _ask)
            else:
                run.read(f"look-{n}", _look, n)

        for _ in range(WARM_UP):
            call("llm")
            call("read")
        watch = getattr(ledger.store, "halt_watch", None)  # the tree measured keeps one
        deadline = time.monotonic() + 10
        while watch is not None and watch.switches_on() is None:
            if time.monotonic() > deadline:
                raise SystemExit("the kill switches were never kept in memory")
            time.sleep(0.01)
        print(json.dumps({"oncelog": oncelog.__file__}), flush=True)
        for line in sys.stdin:
            order = json.loads(line)
            before, cpu = dict(_counted), time.process_time()
            samples, clock = [], time.perf_counter_ns
            for _ in range(order["count"]):
                start = clock()
                call(order["kind"])
                samples.append(clock() - start)
            answer = {
                "ns": samples,
                "cpu": time.process_time() - cpu,
                "statements": _counted["calls"] - before["calls"],
                "listener": _counted["other"] - before["other"],
            }
            print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
