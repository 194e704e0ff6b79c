"""Per-effect overhead: a guarded effect against the bare call and against the floor,
in alternating batches, for durability ``intent`` (the default: one fsync per effect),
``full`` and ``process``."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .breakdown import Breakdown, measure_breakdown, measure_wal_pages
from .floor import Floor
from .profiling import ProfileRow, profile_effects
from .settings import Log, Settings
from .stats import Dist
from .workload import EffectInput, open_guarded, send_email

VARIANTS = (
    "floor_intent", "guarded_intent", "floor_full", "guarded_full", "floor_normal",
    "guarded_process", "bare",
)  # fmt: skip
# ratio name -> (guarded variant, its floor); each ratio is taken of the mean and the p50.
# Each mode against the floor of what it promises: intent, one fsynced commit and one
# unsynced; full, two fsynced; process, two unsynced.
RATIOS = {
    "intent_vs_floor": ("guarded_intent", "floor_intent"),
    "full_vs_floor": ("guarded_full", "floor_full"),
    "process_vs_floor": ("guarded_process", "floor_normal"),
}

Call = Callable[[EffectInput], object]


@dataclass
class EffectResults:
    reps: int
    batch: int
    dists: dict[str, Dist]
    ratios: dict[str, list[float]]  # per repetition
    breakdown: Breakdown
    wal_pages: dict[str, float]
    profile: list[ProfileRow]

    def ratio(self, name: str) -> float:
        return statistics.median(self.ratios[name])


def time_batch(call: Call, items: list[EffectInput]) -> list[int]:
    gc.collect()
    out: list[int] = []
    clock = time.perf_counter_ns
    for item in items:
        start = clock()
        call(item)
        out.append(clock() - start)
    return out


@contextmanager
def contenders(folder: Path, run_id: str, effects: int) -> Iterator[dict[str, Call]]:
    """Each variant, ready to do one effect; afterwards, checks that every guarded effect
    called its tool exactly once (``effects`` calls in all, per ledger)."""
    floor_intent = Floor(folder / "floor-intent.db", "INTENT")
    floor_full = Floor(folder / "floor-full.db", "FULL")
    floor_normal = Floor(folder / "floor-normal.db", "NORMAL")
    intent, intent_tool = open_guarded(folder / "guarded-intent.db", "intent")
    full, full_tool = open_guarded(folder / "guarded-full.db", "full")
    process, process_tool = open_guarded(folder / "guarded-process.db", "process")
    with (
        intent.run(run_id) as run_intent,
        full.run(run_id) as run_full,
        process.run(run_id) as run_process,
    ):
        yield {
            "floor_intent": floor_intent.effect,
            "floor_full": floor_full.effect,
            "guarded_intent": lambda i: run_intent.effect(i.step_id, intent_tool.tool, **i.kwargs),
            "guarded_full": lambda i: run_full.effect(i.step_id, full_tool.tool, **i.kwargs),
            "floor_normal": floor_normal.effect,
            "guarded_process": lambda i: run_process.effect(
                i.step_id, process_tool.tool, **i.kwargs
            ),
            "bare": lambda i: send_email(**i.kwargs, idempotency_key=i.key),
        }
    for floor in (floor_intent, floor_full, floor_normal):
        floor.close()
    for ledger in (intent, full, process):
        ledger.close()
    if {intent_tool.calls, full_tool.calls, process_tool.calls} != {effects}:
        raise RuntimeError("a guarded effect did not call its tool exactly once")


def time_reps(
    calls: dict[str, Call], items: list[EffectInput], settings: Settings, log: Log
) -> dict[str, list[Dist]]:
    """Each variant's distribution per repetition; repetition 0 is a discarded warm-up."""
    per_rep: dict[str, list[Dist]] = {name: [] for name in VARIANTS}
    for rep in range(settings.reps + 1):
        batch = items[rep * settings.batch : (rep + 1) * settings.batch]
        # Rotate the order so no variant always runs right after a checkpoint-heavy one.
        order = VARIANTS[rep % len(VARIANTS) :] + VARIANTS[: rep % len(VARIANTS)]
        for name in order:
            samples = time_batch(calls[name], batch)
            if rep > 0:
                per_rep[name].append(Dist.of(samples))
        if rep > 0:
            log(
                f"  rep {rep}/{settings.reps}: "
                + ", ".join(f"{n} {per_rep[n][-1].mean:.0f}us" for n in VARIANTS)
            )
    return per_rep


def ratios_of(per_rep: dict[str, list[Dist]]) -> dict[str, list[float]]:
    """Guarded over floor, per repetition: ``name`` of the means, ``name_p50`` of the p50s."""
    out: dict[str, list[float]] = {}
    for name, (guarded, floor) in RATIOS.items():
        for stat, suffix in (("mean", ""), ("p50", "_p50")):
            out[name + suffix] = [
                getattr(g, stat) / getattr(f, stat)
                for g, f in zip(per_rep[guarded], per_rep[floor], strict=True)
            ]
    return out


def measure_effects(folder: Path, settings: Settings, log: Log) -> EffectResults:
    run_id = "overhead"
    # +1: the first batch of every variant is a warm-up and is thrown away.
    items = [EffectInput.make(run_id, n) for n in range((settings.reps + 1) * settings.batch)]
    with contenders(folder, run_id, len(items)) as calls:
        per_rep = time_reps(calls, items, settings, log)
    log("  statement breakdown, WAL pages and profile ...")
    return EffectResults(
        reps=settings.reps,
        batch=settings.batch,
        dists={name: Dist.median_of(d) for name, d in per_rep.items()},
        ratios=ratios_of(per_rep),
        breakdown=measure_breakdown(folder, settings.breakdown_effects),
        wal_pages=measure_wal_pages(folder),
        profile=profile_effects(folder, settings.breakdown_effects),
    )
