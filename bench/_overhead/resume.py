"""Resume: re-enter a recorded run and replay every step, against a raw SELECT of the same
rows and against that SELECT between two durable commits."""

from __future__ import annotations

import gc
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import oncelog

from .floor import raw_connection
from .stats import ms
from .workload import CountingTool, open_guarded, replay, step_args

_SELECT_STEPS = "SELECT * FROM steps WHERE run_id = ? ORDER BY seq"
_TOUCH_RUN = "UPDATE runs SET updated_at = ? WHERE run_id = ?"


@dataclass
class ResumeResult:
    steps: int
    reps: int
    enter_ms: float  # acquire: one durable commit
    replay_ms: float  # every step asked for again, none called
    exit_ms: float  # finish: one durable commit
    total_ms: float  # enter + replay + exit, ledger already open
    with_open_ms: float  # oncelog.open + total + close
    open_reps: int
    select_ms: float  # raw SELECT of the same rows
    floor_ms: float  # raw SELECT + two durable commits

    @property
    def us_per_step(self) -> float:
        return self.replay_ms * 1000 / self.steps


def timed_resume(ledger: oncelog.Ledger, tool: CountingTool, run_id: str, steps: int) -> list[int]:
    """ns of [enter, replay, exit, total]."""
    clock = time.perf_counter_ns
    before = tool.calls
    t0 = clock()
    with ledger.run(run_id) as run:
        t1 = clock()
        for i in range(steps):
            run.effect(f"s{i}", tool.tool, **step_args(i))
        t2 = clock()
    t3 = clock()
    if tool.calls != before:
        raise RuntimeError(f"{run_id}: replay called the tool")
    return [t1 - t0, t2 - t1, t3 - t2, t3 - t0]


def raw_select(db: sqlite3.Connection, run_id: str) -> int:
    start = time.perf_counter_ns()
    db.execute(_SELECT_STEPS, (run_id,)).fetchall()
    return time.perf_counter_ns() - start


def raw_floor(db: sqlite3.Connection, run_id: str) -> int:
    """The least a durable resume can do: commit taking the run, read it, commit leaving."""
    start = time.perf_counter_ns()
    db.execute("BEGIN IMMEDIATE")
    db.execute(_TOUCH_RUN, (time.time(), run_id))
    db.execute("COMMIT")
    db.execute(_SELECT_STEPS, (run_id,)).fetchall()
    db.execute("BEGIN IMMEDIATE")
    db.execute(_TOUCH_RUN, (time.time(), run_id))
    db.execute("COMMIT")
    return time.perf_counter_ns() - start


def resume_with_open(path: Path, run_id: str, steps: int, reps: int) -> list[int]:
    """ns of ``oncelog.open`` + a whole resume + close, ``reps`` times."""
    out: list[int] = []
    for _ in range(reps):
        gc.collect()
        start = time.perf_counter_ns()
        ledger, tool = open_guarded(path)
        replay(ledger, tool, run_id, steps)
        ledger.close()
        out.append(time.perf_counter_ns() - start)
    return out


def measure_resume(path: Path, run_id: str, steps: int, reps: int, open_reps: int) -> ResumeResult:
    ledger, tool = open_guarded(path)
    raw = raw_connection(path, "FULL")
    replay(ledger, tool, run_id, steps)  # warm-up: page cache, statement cache
    phases: list[list[int]] = []
    selects: list[int] = []
    floors: list[int] = []
    for _ in range(reps):
        gc.collect()
        selects.append(raw_select(raw, run_id))
        floors.append(raw_floor(raw, run_id))
        phases.append(timed_resume(ledger, tool, run_id, steps))
    ledger.close()
    with_open = resume_with_open(path, run_id, steps, open_reps)
    raw.close()
    enter, replay_, exit_, total = (ms(statistics.median(p[i] for p in phases)) for i in range(4))
    return ResumeResult(
        steps=steps,
        reps=reps,
        enter_ms=enter,
        replay_ms=replay_,
        exit_ms=exit_,
        total_ms=total,
        with_open_ms=ms(statistics.median(with_open)),
        open_reps=open_reps,
        select_ms=ms(statistics.median(selects)),
        floor_ms=ms(statistics.median(floors)),
    )
