"""How much the benchmark does (full or ``--quick``), and what it varies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Progress lines go to stderr through this; the report alone goes to stdout.
Log = Callable[[str], None]

WORKER_COUNTS = (1, 2, 4, 8)
EFFECTS_PER_RUN = 5


@dataclass(frozen=True)
class Tool:
    """What the provider does per effect: ``wait_ms`` 0 is a no-op call, so the ledger's own
    cost is what is measured; a wait shows how workers overlap time spent on the provider."""

    label: str
    wait_ms: float
    runs: int  # submitted per measurement, of EFFECTS_PER_RUN effects each

    @property
    def effects(self) -> int:
        return self.runs * EFFECTS_PER_RUN


@dataclass(frozen=True)
class Settings:
    quick: bool
    tools: tuple[Tool, ...]
    reps: int  # each (store, tool, workers) measured this many times; medians reported
    floor_commits: int  # per floor batch (one batch right before each measurement)


FULL = Settings(
    quick=False,
    tools=(Tool("no-op", 0.0, 300), Tool("waits 5 ms", 5.0, 100)),
    reps=3,
    floor_commits=300,
)
QUICK = Settings(
    quick=True,
    tools=(Tool("no-op", 0.0, 40), Tool("waits 5 ms", 5.0, 20)),
    reps=1,
    floor_commits=150,
)
