"""cProfile of the Python side: guarded effects, and the replay of a long run."""

from __future__ import annotations

import cProfile
import pstats
from dataclasses import dataclass
from pathlib import Path

from .workload import EffectInput, open_guarded, replay


@dataclass(frozen=True)
class ProfileRow:
    function: str
    calls_per_step: float
    tottime_us: float  # per step
    cumtime_us: float


def short_name(file_name: str, line: int, function: str) -> str:
    if "oncelog" in file_name:
        file_name = "oncelog/" + file_name.rpartition("/oncelog/")[2]
    elif file_name.startswith("~") or not file_name:
        return function
    else:
        file_name = Path(file_name).name
    return f"{file_name}:{line} {function}"


def top_functions(profiler: cProfile.Profile, steps: int, count: int = 14) -> list[ProfileRow]:
    # Stats.stats is keyed by (file, line, name) and unrounded; get_stats_profile() keys
    # by name alone (same-named functions overwrite each other) and rounds to milliseconds.
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:count]
    return [
        ProfileRow(short_name(file, line, name), calls / steps, own * 1e6 / steps,
                   cumulative * 1e6 / steps)
        for (file, line, name), (_, calls, own, cumulative, _) in rows
    ]  # fmt: skip


def profile_effects(folder: Path, n: int) -> list[ProfileRow]:
    """``n`` guarded effects (durability full), per effect."""
    ledger, tool = open_guarded(folder / "profile.db")
    items = [EffectInput.make("profile", i) for i in range(n)]
    profiler = cProfile.Profile()
    with ledger.run("profile") as run:
        profiler.enable()
        for item in items:
            run.effect(item.step_id, tool.tool, **item.kwargs)
        profiler.disable()
    ledger.close()
    return top_functions(profiler, n)


def profile_replay(path: Path, run_id: str, steps: int) -> list[ProfileRow]:
    """One replay of a recorded run, per step."""
    ledger, tool = open_guarded(path)
    profiler = cProfile.Profile()
    profiler.enable()
    replay(ledger, tool, run_id, steps)
    profiler.disable()
    ledger.close()
    return top_functions(profiler, steps)
