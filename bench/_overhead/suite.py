"""The whole benchmark in order: effects, resume, memory, gathered into one report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from .effects import EffectResults, measure_effects
from .machine import Machine, describe_machine, load_average
from .memory import MemoryResult, measure_memory
from .profiling import ProfileRow, profile_replay
from .recording import record_run
from .resume import ResumeResult, measure_resume
from .settings import Log, Settings

RESUME_DB = "resume.db"  # the 20-step run
REPLAY_DB = "replay.db"  # the long runs: 10,000 steps and every memory size


@dataclass
class Report:
    settings: Settings
    machine: Machine
    started: str
    seconds: float = 0.0
    load_start: str = field(default_factory=load_average)
    load_end: str = ""
    effects: EffectResults | None = None
    resume: list[ResumeResult] = field(default_factory=list)
    replay_profile: list[ProfileRow] = field(default_factory=list)
    memory: list[MemoryResult] = field(default_factory=list)


def record_runs(folder: Path, settings: Settings, log: Log) -> dict[int, float]:
    """A 20-step run in resume.db; in replay.db, one run per size that resume and memory
    replay. Returns the seconds each size took to record."""
    record_run(folder / RESUME_DB, "steps-20", 20, "ledger")
    record_seconds = {}
    for steps in sorted({10_000, *settings.memory_sizes}):
        record_seconds[steps] = record_run(
            folder / REPLAY_DB, f"steps-{steps}", steps, settings.generate
        )
        log(f"  recorded {steps} steps ({settings.generate}) in {record_seconds[steps]:.1f}s")
    return record_seconds


def measure_resumes(folder: Path, settings: Settings, log: Log) -> list[ResumeResult]:
    s = settings
    short = measure_resume(
        folder / RESUME_DB, "steps-20", 20, s.resume20_reps, s.resume20_open_reps
    )
    log(f"  20 steps: {short.total_ms:.2f} ms")
    long = measure_resume(
        folder / REPLAY_DB, "steps-10000", 10_000, s.resume10k_reps, s.resume10k_open_reps
    )
    log(f"  10000 steps: {long.total_ms:.1f} ms")
    steps = max(s.memory_sizes)
    longest = measure_resume(
        folder / REPLAY_DB, f"steps-{steps}", steps, s.resume_longest_reps, s.resume_longest_reps
    )
    log(f"  {steps} steps: {longest.total_ms:.1f} ms")
    return [short, long, longest]


def run_benchmark(settings: Settings, folder: Path, log: Log) -> Report:
    report = Report(settings, describe_machine(folder), time.strftime("%Y-%m-%d %H:%M %Z"))
    start = time.perf_counter()
    log(f"1/3 effects: {settings.reps} reps x {settings.batch} per variant, in {folder}")
    report.effects = measure_effects(folder, settings, log)

    log("2/3 resume: recording runs ...")
    record_seconds = record_runs(folder, settings, log)
    report.resume = measure_resumes(folder, settings, log)
    report.replay_profile = profile_replay(folder / REPLAY_DB, "steps-10000", 10_000)

    log("3/3 memory")
    report.memory = measure_memory(folder / REPLAY_DB, settings.memory_sizes, record_seconds, log)
    report.seconds = time.perf_counter() - start
    report.load_end = load_average()
    return report
