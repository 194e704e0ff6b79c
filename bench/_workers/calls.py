"""A model call and a read on PostgreSQL against their floor, one bare autocommit round
trip, and against another oncelog (``--baseline TREE``: before the kill switch was kept
in memory), in one run: every batch alternates with the others.

Each tree's calls run in a process of its own (``calls_worker.py``, on a fresh schema; the
process imports the tree's ``src``), the floor in this one: an INSERT of a row the size of
a step row in autocommit with ``synchronous_commit = off``, as a call's record commits
(it rides on the next flushed commit). Reported per kind and tree: time per call (mean,
p50) and its ratio to the floor of the same repetition, the statements each call sent
(counted in the worker at ``psycopg.Cursor.execute``: one statement, one round trip),
the listener's statements, CPU per call of the worker and, when the server runs here, of
the server (its own cluster).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from _overhead.machine import load_average
from _overhead.stats import Dist

from . import postgres
from .floor import COLUMNS, PG_TABLE, row
from .stores import Store

WORKER = Path(__file__).with_name("calls_worker.py")
KINDS = ("llm", "read")
_INSERT = f"INSERT INTO floor ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"


@dataclass(frozen=True)
class Batch:
    times: Dist  # per call, microseconds
    worker_cpu_ms: float
    server_cpu_ms: float | None
    statements: float  # per call, by the calls
    listener: float  # per call, by the worker's other threads
    seconds: float  # the batch's wall time


@dataclass(frozen=True)
class Line:
    name: str
    batch: Batch  # medians over the repetitions
    ratio_mean: float  # to the floor of the same repetition, median over them
    ratio_p50: float


@dataclass(frozen=True)
class CallsComparison:
    lines: list[Line]
    load: tuple[str, str]
    reps: int
    batch: int


class _Worker:
    def __init__(self, tree: Path, url: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        found = json.loads(self._line())["oncelog"]
        if not Path(found).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"the worker for {tree} imported oncelog from {found}")

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a calls worker ended (exit {self.process.wait()})")
        return line

    def batch(self, kind: str, count: int) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"kind": kind, "count": count}) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self._line())
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


Work = Callable[[int], dict[str, Any]]  # count -> ns, cpu, statements, listener


def _batch(store: Store, work: Work, count: int) -> Batch:
    """``work(count)``, with the server's CPU meanwhile."""
    server = store.server_cpu
    served = server() if server else 0.0
    answer = work(count)
    server_ms = (server() - served) * 1000 / count if server else None
    samples: list[int] = answer["ns"]
    return Batch(
        Dist.of(samples), answer["cpu"] * 1000 / count, server_ms,
        answer["statements"] / count, answer["listener"] / count, sum(samples) / 1e9,
    )  # fmt: skip


def compare_calls(
    store: Store, trees: list[tuple[str, Path]], reps: int, batch: int
) -> CallsComparison:
    started = load_average()
    with ExitStack() as stack:
        floor_url = stack.enter_context(store.fresh("calls-floor"))
        conn = stack.enter_context(postgres.connect(floor_url))
        conn.execute("SET synchronous_commit = off")
        conn.execute(PG_TABLE)
        rows = iter([row(n) for n in range(batch * (reps + 1))])

        def floor(count: int) -> dict[str, Any]:
            samples, cpu, clock = [], time.process_time(), time.perf_counter_ns
            for _ in range(count):
                values = next(rows)
                start = clock()
                conn.execute(_INSERT, values)
                samples.append(clock() - start)
            return {"ns": samples, "cpu": time.process_time() - cpu, "statements": count,
                    "listener": 0}  # fmt: skip

        workers: dict[str, _Worker] = {}
        for n, (name, tree) in enumerate(trees):
            url = stack.enter_context(store.fresh(f"calls-{n}"))
            workers[name] = _Worker(tree, url)
            stack.callback(workers[name].close)
        floor(batch)  # warm
        measured: dict[str, list[Batch]] = {}
        ratios: dict[str, list[tuple[float, float]]] = {}
        for _ in range(reps):
            bare = _batch(store, floor, batch)
            measured.setdefault("floor", []).append(bare)
            for kind in KINDS:
                for name, worker in workers.items():
                    key = f"{kind} {name}"
                    ours = _batch(store, partial(worker.batch, kind), batch)
                    measured.setdefault(key, []).append(ours)
                    ratios.setdefault(key, []).append(
                        (ours.times.mean / bare.times.mean, ours.times.p50 / bare.times.p50)
                    )
    lines = [Line("floor", _median(measured.pop("floor")), 1.0, 1.0)]
    for key, batches in measured.items():
        lines.append(
            Line(
                key, _median(batches),
                statistics.median(r[0] for r in ratios[key]),
                statistics.median(r[1] for r in ratios[key]),
            )
        )  # fmt: skip
    return CallsComparison(lines, (started, load_average()), reps, batch)


def _median(batches: list[Batch]) -> Batch:
    servers = [b.server_cpu_ms for b in batches if b.server_cpu_ms is not None]
    return Batch(
        Dist.median_of([b.times for b in batches]),
        statistics.median(b.worker_cpu_ms for b in batches),
        statistics.median(servers) if servers else None,
        statistics.median(b.statements for b in batches),
        statistics.median(b.listener for b in batches),
        statistics.median(b.seconds for b in batches),
    )


def render_calls(result: CallsComparison) -> str:
    def cells(line: Line) -> str:
        b = line.batch
        server = "n/a" if b.server_cpu_ms is None else f"{b.server_cpu_ms:.3f}"
        listener = f"{b.listener * 1000:.1f}" if line.name != "floor" else "-"
        return (
            f"| {line.name} | {b.times.mean / 1000:.3f} | {b.times.p50 / 1000:.3f} | "
            f"{line.ratio_mean:.2f}x | {line.ratio_p50:.2f}x | {b.statements:.2f} | {listener} | "
            f"{b.worker_cpu_ms:.3f} | {server} |"
        )

    return "\n".join([
        f"Model calls (`run.llm`) and reads (`run.read`) on PostgreSQL against one bare "
        f"autocommit round trip (an INSERT of a step-sized row, `synchronous_commit = off`): "
        f"{result.reps} alternating batches of {result.batch}, medians; load average "
        f"{result.load[0]} at start, {result.load[1]} at end.",
        "",
        "| | ms per call (mean) | ms (p50) | vs floor (mean) | vs floor (p50) | statements "
        "per call | listener statements per 1,000 calls | worker CPU ms per call | server "
        "CPU ms per call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *[cells(line) for line in result.lines],
    ])  # fmt: skip
