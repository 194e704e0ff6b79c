"""How much the benchmark does (full or ``--quick``), and the targets it reports against."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Progress lines go to stderr through this; the report alone goes to stdout.
Log = Callable[[str], None]

# The targets from the issue.
TARGET_EFFECT_RATIO = 1.3
TARGET_RESUME_20_MS = 5.0
TARGET_RESUME_10K_MS = 200.0
TARGET_REPLAY_US_PER_STEP = 5.0  # issue 15: 100,000 steps resumed in at most 0.5 s
# "Flat": 100x more steps may not cost more than this factor in replay peak memory.
FLAT_FACTOR = 1.5
# ... and its resident size may not grow more than this much more: SQLite's page cache
# (cache_size -2000, about 2 MiB per connection) fills as more of the file is read.
FLAT_RSS_KIB = 4 * 1024


@dataclass(frozen=True)
class Settings:
    quick: bool
    reps: int  # repetitions of the interleaved effect batches
    batch: int  # effects per variant per repetition
    breakdown_effects: int  # effects timed per SQL statement, and profiled
    resume20_reps: int
    resume20_open_reps: int
    resume10k_reps: int
    resume10k_open_reps: int
    resume_longest_reps: int  # the longest run of memory_sizes, resumed too
    memory_sizes: tuple[int, ...]
    generate: str  # "ledger": recorded by ledger.run; "bulk": rows inserted in one txn


FULL = Settings(
    quick=False,
    reps=21,
    batch=300,
    breakdown_effects=1000,
    resume20_reps=300,
    resume20_open_reps=100,
    resume10k_reps=7,
    resume10k_open_reps=3,
    resume_longest_reps=3,
    memory_sizes=(1_000, 10_000, 100_000),
    generate="ledger",
)
QUICK = Settings(
    quick=True,
    reps=7,
    batch=100,
    breakdown_effects=150,
    resume20_reps=100,
    resume20_open_reps=30,
    resume10k_reps=3,
    resume10k_open_reps=1,
    resume_longest_reps=1,
    memory_sizes=(1_000, 10_000, 30_000),
    generate="bulk",
)
