"""One measurement: submit the runs, start W ``oncelog worker --until-idle`` processes, let
them go together, and read back what they did; then check that every run completed and
every effect happened exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import oncelog

from .agent import FOLDER_ENV
from .cpu import machine_ticks
from .settings import EFFECTS_PER_RUN, Tool

BENCH_DIR = Path(__file__).resolve().parent.parent
HANDLER = "_workers.agent:handle"
ASYNC_HANDLER = "_workers.agent:handle_async"
START_TIMEOUT = 60.0
NS_PER_S = 1e9


@dataclass(frozen=True)
class FleetResult:
    workers: int
    seconds: float  # from "go" until the last worker finished
    latencies_ns: list[int]  # one per effect, as the agent waited for run.effect
    worker_cpu_seconds: float  # the workers' CPU time after "go", summed
    machine_busy: float  # share of all cores' time not idle, from /proc/stat, same window
    server_cpu_seconds: float | None  # a local PostgreSQL server's, same window
    # Per worker: its resident memory at "go" and at its peak, KiB.
    memory_kib: list[tuple[int, int]] = field(default_factory=list)
    most_in_flight: int = 1  # the most runs one worker held inside their handlers at once


def submit_runs(url: str, tool: Tool) -> None:
    with oncelog.open(url) as ledger:
        for n in range(tool.runs):
            ledger.submit(f"run-{n}", {"effects": EFFECTS_PER_RUN, "wait_ms": tool.wait_ms})


def start_workers(
    url: str, count: int, folder: Path, handler: str = HANDLER, options: tuple[str, ...] = ()
) -> list[subprocess.Popen[bytes]]:
    # $ONCELOG_URL too: the agent opens the ledger once before it says it is ready.
    env = {**os.environ, FOLDER_ENV: str(folder), "ONCELOG_URL": url}
    command = [sys.executable, "-m", "oncelog", "worker", handler, "--until-idle", "--db", url]
    command += options
    workers = []
    for n in range(count):
        with (folder / f"worker-{n}.log").open("wb") as log:
            workers.append(
                subprocess.Popen(command, cwd=BENCH_DIR, env=env, stdout=log, stderr=log)
            )
    return workers


def failure(what: str, folder: Path, workers: list[subprocess.Popen[bytes]]) -> RuntimeError:
    """An error that says what the failed workers said last (their logs stay in ``folder``)."""
    said = [
        f"worker {n} (exit {w.returncode}): "
        + " | ".join((folder / f"worker-{n}.log").read_text(errors="replace").splitlines()[-3:])
        for n, w in enumerate(workers)
        if w.returncode
    ]
    return RuntimeError("; ".join([f"{what}, in {folder}", *said]))


def wait_ready(workers: list[subprocess.Popen[bytes]], folder: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while len(list(folder.glob("ready-*"))) < len(workers):
        if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
            raise failure("workers did not start", folder, workers)
        time.sleep(0.01)


def finish(workers: list[subprocess.Popen[bytes]], folder: Path) -> None:
    for worker in workers:
        worker.wait()
    if any(w.returncode for w in workers):
        raise failure("a worker failed", folder, workers)


def check_exactly_once(url: str, tool: Tool, calls: int, spans: int) -> None:
    with oncelog.open(url) as ledger:
        completed = len(ledger.runs("completed", limit=tool.runs + 1))
    expected = tool.effects
    if completed != tool.runs or calls != expected or spans != expected:
        raise RuntimeError(
            f"{completed}/{tool.runs} runs completed, {calls} tool calls and {spans} "
            f"effects timed for {expected} effects"
        )


def run_fleet(
    url: str, workers: int, tool: Tool, folder: Path, server_cpu: Callable[[], float] | None,
    handler: str = HANDLER, options: tuple[str, ...] = (),
) -> FleetResult:  # fmt: skip
    """``folder`` must be new and empty: the workers meet there. ``server_cpu`` reads the
    CPU seconds the store's server has used so far, if it can be read. ``handler`` and
    ``options`` are the workers' (``--concurrency N`` with ``ASYNC_HANDLER``)."""
    submit_runs(url, tool)
    processes = start_workers(url, workers, folder, handler, options)
    try:
        wait_ready(processes, folder)
        busy0, total0 = machine_ticks()
        server0 = server_cpu() if server_cpu else 0.0
        go = time.monotonic_ns()
        (folder / "go").touch()
        finish(processes, folder)
        busy1, total1 = machine_ticks()
        server1 = server_cpu() if server_cpu else None
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    samples = [json.loads(p.read_text()) for p in folder.glob("samples-*.json")]
    spans = [span for sample in samples for span in sample["spans"]]
    calls = sum(sample["calls"] for sample in samples)
    check_exactly_once(url, tool, calls, len(spans))
    done = max(sample["done_ns"] for sample in samples)
    return FleetResult(
        workers=workers,
        seconds=(done - go) / NS_PER_S,
        latencies_ns=[end - start for start, end in spans],
        worker_cpu_seconds=sum(sample["cpu_seconds"] for sample in samples),
        machine_busy=(busy1 - busy0) / max(1, total1 - total0),
        server_cpu_seconds=None if server1 is None else server1 - server0,
        memory_kib=[(sample["rss_at_go_kib"], sample["max_rss_kib"]) for sample in samples],
        most_in_flight=max(sample["most_in_flight"] for sample in samples),
    )
