"""What the parent measures, each contender in child processes, the contenders taking
turns within every repetition so that the machine's drift hits them alike."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .agents import AGENTS, STEPS, WARM_ONLY

SCRIPT = Path(__file__).parents[1] / "peers.py"
CHILD_TIMEOUT = 300.0


@dataclass
class Results:
    warm_ms: dict[str, list[float]] = field(default_factory=dict)  # ms per 20-step run
    cpu_ms: dict[str, list[float]] = field(default_factory=dict)  # the same runs' CPU
    fsync_ms: list[float] = field(default_factory=list)  # this disk, once per repetition
    # Start to exit, and restart to last step; not for ``WARM_ONLY`` contenders.
    process_s: dict[str, list[float]] = field(default_factory=dict)
    restart_s: dict[str, list[float]] = field(default_factory=dict)

    def median(self, table: dict[str, list[float]], name: str) -> float:
        return statistics.median(table[name])

    def step_overhead_ms(self, name: str) -> float:
        """Per step, above the bare loop (medians)."""
        bare = self.median(self.warm_ms, "bare loop")
        return (self.median(self.warm_ms, name) - bare) / STEPS

    def step_cpu_ms(self, name: str) -> float:
        """Per step, the CPU above the bare loop's (medians): what no disk changes."""
        bare = self.median(self.cpu_ms, "bare loop")
        return (self.median(self.cpu_ms, name) - bare) / STEPS


def child(name: str, db: Path, mode: str, marker: Path | None = None) -> str:
    argv = [sys.executable, str(SCRIPT), "--child", name, "--db", str(db), "--mode", mode]
    argv += ["--marker", str(marker)] if marker else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    if done.returncode not in (0, -9):
        raise RuntimeError(f"{name} {mode}: exit {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def slug(name: str) -> str:
    """A file name's part for ``name``: letters and digits."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def warm(name: str, folder: Path, rep: int, runs: int) -> tuple[float, float]:
    wall, cpu = child(name, folder / f"{slug(name)}-warm-{rep}.db", f"warm:{runs}").split()
    return float(wall), float(cpu)


def fsync_ms(folder: Path, times: int = 50) -> float:
    """What one fsync of a 4 KiB write costs on this disk now (median): the figure the
    contenders' overheads move with, from hour to hour."""
    spent = []
    fd = os.open(folder / "fsync-probe", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(times):
            os.pwrite(fd, os.urandom(4096), 0)
            start = time.perf_counter()
            os.fdatasync(fd)
            spent.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return statistics.median(spent) * 1000


def whole_process(name: str, folder: Path, rep: int) -> float:
    start = time.perf_counter()
    child(name, folder / f"{slug(name)}-once-{rep}.db", "once")
    return time.perf_counter() - start


def restart(name: str, folder: Path, rep: int) -> float:
    db = folder / f"{slug(name)}-restart-{rep}.db"
    marker = folder / f"{slug(name)}-restart-{rep}.mark"
    child(name, db, "crash")
    start = time.time()
    child(name, db, "resume", marker)
    return float(marker.read_text()) - start


def measure(folder: Path, reps: int, runs: int, log: Callable[[str], None]) -> Results:
    results = Results()
    for rep in range(reps):
        order = list(AGENTS)[rep % len(AGENTS) :] + list(AGENTS)[: rep % len(AGENTS)]
        for name in order:
            wall, cpu = warm(name, folder, rep, runs)
            results.warm_ms.setdefault(name, []).append(wall)
            results.cpu_ms.setdefault(name, []).append(cpu)
            if name in WARM_ONLY:
                continue
            results.process_s.setdefault(name, []).append(whole_process(name, folder, rep))
            results.restart_s.setdefault(name, []).append(restart(name, folder, rep))
        results.fsync_ms.append(fsync_ms(folder))
        log(f"rep {rep + 1}/{reps}: " + ", ".join(
            f"{n} {results.warm_ms[n][-1]:.2f} ms/run" for n in AGENTS
        ))  # fmt: skip
    return results
