"""Per-effect time distributions and unit conversions."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

NS_PER_US = 1_000
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class Dist:
    """Per-effect times of one batch, in microseconds."""

    mean: float
    p50: float
    p99: float

    @staticmethod
    def of(samples_ns: list[int]) -> Dist:
        ordered = sorted(samples_ns)
        return Dist(
            statistics.fmean(ordered) / NS_PER_US,
            quantile(ordered, 0.50) / NS_PER_US,
            quantile(ordered, 0.99) / NS_PER_US,
        )

    @staticmethod
    def median_of(dists: list[Dist]) -> Dist:
        return Dist(
            statistics.median(d.mean for d in dists),
            statistics.median(d.p50 for d in dists),
            statistics.median(d.p99 for d in dists),
        )


def quantile(ordered: list[int], q: float) -> float:
    """Nearest-rank quantile of sorted samples."""
    return float(ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))])


def ms(ns: float) -> float:
    return ns / NS_PER_MS
