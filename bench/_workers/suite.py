"""The whole benchmark in order: per repetition, per store, per tool, each worker count (in
an order that rotates between repetitions), a floor batch and then the workers."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from _overhead.machine import Machine, describe_machine, load_average

from .fleet import run_fleet
from .results import Floor, Measurement
from .settings import WORKER_COUNTS, Log, Settings, Tool
from .stores import Store


@dataclass
class Report:
    settings: Settings
    machine: Machine
    postgres: dict[str, str] | None  # the server's facts, when it was measured
    started: str
    seconds: float = 0.0
    load_start: str = field(default_factory=load_average)
    load_end: str = ""
    measurements: list[Measurement] = field(default_factory=list)


def measure(
    store: Store, tool: Tool, workers: int, settings: Settings, folder: Path
) -> Measurement:
    """A floor batch on a fresh ledger of ``store``, then the workers on another."""
    with store.fresh("floor") as url:
        floor = Floor.of(store.floor(url, settings.floor_commits))
    folder.mkdir()
    with store.fresh("ledger") as url:
        fleet = run_fleet(url, workers, tool, folder, store.server_cpu)
    return Measurement.of(store.name, tool, fleet, floor)


def run_benchmark(
    settings: Settings, stores: list[Store], postgres: dict[str, str] | None, folder: Path, log: Log
) -> Report:
    report = Report(
        settings, describe_machine(folder), postgres, time.strftime("%Y-%m-%d %H:%M %Z")
    )
    start = time.perf_counter()
    for rep in range(settings.reps):
        # Rotated, so that no worker count always runs first, when the machine is freshest.
        counts = WORKER_COUNTS[rep:] + WORKER_COUNTS[:rep]
        for store in stores:
            for tool in settings.tools:
                for workers in counts:
                    label = re.sub(r"\W+", "-", f"{store.name}-{tool.label}-{workers}-{rep}")
                    m = measure(store, tool, workers, settings, folder / label)
                    report.measurements.append(m)
                    log(
                        f"rep {rep + 1}/{settings.reps} {store.name} {tool.label} x{workers}: "
                        f"{m.effects_per_s:.0f} effects/s, p50 {m.p50_ms:.2f} ms, "
                        f"p99 {m.p99_ms:.2f} ms; floor {m.floor.commits_per_s:.0f} commits/s; "
                        f"CPU busy {m.machine_busy:.0%}"
                    )
    report.seconds = time.perf_counter() - start
    report.load_end = load_average()
    return report
