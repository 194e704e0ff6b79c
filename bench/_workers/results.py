"""What one measurement yields, as numbers and as ratios to the floor measured right before
it; and the medians over repetitions that the report shows."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from _overhead.stats import NS_PER_MS, quantile

from .fleet import NS_PER_S, FleetResult
from .settings import Tool


@dataclass(frozen=True)
class Floor:
    commits_per_s: float
    p50_ms: float
    p99_ms: float

    @staticmethod
    def of(commits_ns: list[int]) -> Floor:
        ordered = sorted(commits_ns)
        return Floor(
            len(ordered) * NS_PER_S / sum(ordered),
            quantile(ordered, 0.50) / NS_PER_MS,
            quantile(ordered, 0.99) / NS_PER_MS,
        )


@dataclass(frozen=True)
class Measurement:
    store: str
    tool: str
    workers: int
    effects_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_effect: float  # the workers' CPU, not the PostgreSQL server's
    machine_busy: float
    server_cpu_ms_per_effect: float | None  # a local PostgreSQL server's
    floor: Floor

    @staticmethod
    def of(store: str, tool: Tool, fleet: FleetResult, floor: Floor) -> Measurement:
        ordered = sorted(fleet.latencies_ns)
        return Measurement(
            store=store,
            tool=tool.label,
            workers=fleet.workers,
            effects_per_s=len(ordered) / fleet.seconds,
            p50_ms=quantile(ordered, 0.50) / NS_PER_MS,
            p99_ms=quantile(ordered, 0.99) / NS_PER_MS,
            cpu_ms_per_effect=fleet.worker_cpu_seconds * 1000 / len(ordered),
            machine_busy=fleet.machine_busy,
            server_cpu_ms_per_effect=None
            if fleet.server_cpu_seconds is None
            else fleet.server_cpu_seconds * 1000 / len(ordered),
            floor=floor,
        )

    # Ratios to the single-commit floor of the same store, measured just before. An effect
    # is at least two commits: at the floor, one worker would reach 0.5x and 2x.
    @property
    def throughput_ratio(self) -> float:
        return self.effects_per_s / self.floor.commits_per_s

    @property
    def p50_ratio(self) -> float:
        return self.p50_ms / self.floor.p50_ms

    @property
    def p99_ratio(self) -> float:
        return self.p99_ms / self.floor.p99_ms


@dataclass(frozen=True)
class Row:
    """The medians over the repetitions of one (store, tool, workers)."""

    store: str
    tool: str
    workers: int
    reps: list[Measurement]

    def median(self, value: Callable[[Measurement], float]) -> float:
        return statistics.median(value(m) for m in self.reps)

    def spread(self, value: Callable[[Measurement], float]) -> tuple[float, float]:
        values = [value(m) for m in self.reps]
        return min(values), max(values)


def rows_of(measurements: list[Measurement]) -> list[Row]:
    """One row per (store, tool, workers), in the order first measured, workers ascending."""
    groups: dict[tuple[str, str, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.store, m.tool, m.workers), []).append(m)
    first: dict[tuple[str, str], int] = {}
    for n, key in enumerate(groups):
        first.setdefault(key[:2], n)
    return [
        Row(store, tool, workers, reps)
        for (store, tool, workers), reps in sorted(
            groups.items(), key=lambda item: (first[item[0][:2]], item[0][2])
        )
    ]
