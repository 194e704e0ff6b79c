"""Many runs in flight in one process (``bench/workers.py --fleet``): one ``oncelog worker
--concurrency N`` process holding up to N runs whose tool awaits 20 ms, from N = 1 to 1,000,
on each store; against a bare asyncio loop with N tasks doing the same sleeps (the fleet's
floor, ``sleeps``) and against P single-run ``oncelog worker`` processes (today's way to
wait on many providers at once). Every run must complete and every effect happen once
(``fleet.check_exactly_once``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _blocks import write_block
from _overhead.machine import Machine, describe_machine, load_average

from .fleet import ASYNC_HANDLER, BENCH_DIR, FleetResult, run_fleet
from .settings import EFFECTS_PER_RUN, Log, Tool
from .stores import Store

KIB_PER_MIB = 1024


@dataclass(frozen=True)
class FleetSettings:
    quick: bool
    in_flight: tuple[int, ...]  # N, one process each
    processes: int  # P single-run worker processes, compared with
    wait_ms: float
    waves: int  # runs submitted: N x waves (at least min_runs), EFFECTS_PER_RUN effects each
    min_runs: int
    # Then one process holding ``held`` runs (one wave) whose tool waits ``held_wait_ms``:
    # long enough that the process is not short of CPU, so its effects/s over the bare
    # loop's is the cost of holding them. 0: not measured.
    held: int
    held_wait_ms: float


FULL = FleetSettings(False, (1, 10, 100, 1000), 16, 20.0, 2, 20, 1000, 2000.0)
QUICK = FleetSettings(True, (1, 8), 4, 20.0, 2, 4, 0, 0.0)


@dataclass(frozen=True)
class Floor:
    effects_per_s: float
    cpu_ms_per_effect: float


@dataclass(frozen=True)
class Line:
    """One measurement: ``processes`` worker processes holding ``in_flight`` runs each."""

    store: str
    processes: int
    in_flight: int
    wait_ms: float
    effects_per_s: float
    cpu_ms_per_effect: float  # the workers' and, where it can be read, the server's
    worker_cpu_ms_per_effect: float  # the workers' alone: no other work is counted in it
    server_measured: bool
    mib_per_run: float
    most_in_flight: int  # seen inside the handlers at once, in one process
    floor: Floor
    machine_busy: float


def runs_for(settings: FleetSettings, in_flight: int) -> int:
    return max(in_flight * settings.waves, settings.min_runs)


def bare_loop(in_flight: int, runs: int, wait_ms: float) -> Floor:
    done = subprocess.run(
        [sys.executable, "-m", "_workers.sleeps", str(in_flight), str(runs), str(wait_ms)],
        cwd=BENCH_DIR, capture_output=True, text=True, check=True,
    )  # fmt: skip
    measured = json.loads(done.stdout)
    effects = runs * EFFECTS_PER_RUN
    return Floor(effects / measured["seconds"], measured["cpu_seconds"] * 1000 / effects)


def line_of(
    store: Store, processes: int, in_flight: int, tool: Tool, fleet: FleetResult, floor: Floor
) -> Line:
    effects = len(fleet.latencies_ns)
    cpu = fleet.worker_cpu_seconds + (fleet.server_cpu_seconds or 0.0)
    # One process holding N runs: what it grew by from "go" to its peak, per run. P
    # processes of one run each: each whole process is what a run costs.
    if processes == 1:
        at_go, peak = fleet.memory_kib[0]
        per_run_kib = (peak - at_go) / fleet.most_in_flight
    else:
        per_run_kib = sum(peak for _, peak in fleet.memory_kib) / processes
    return Line(
        store=store.name, processes=processes, in_flight=in_flight, wait_ms=tool.wait_ms,
        effects_per_s=effects / fleet.seconds, cpu_ms_per_effect=cpu * 1000 / effects,
        worker_cpu_ms_per_effect=fleet.worker_cpu_seconds * 1000 / effects,
        server_measured=fleet.server_cpu_seconds is not None,
        mib_per_run=per_run_kib / KIB_PER_MIB, most_in_flight=fleet.most_in_flight,
        floor=floor, machine_busy=fleet.machine_busy,
    )  # fmt: skip


def measure(
    store: Store, processes: int, in_flight: int, wait_ms: float, runs: int, folder: Path
) -> Line:
    floor = bare_loop(processes * in_flight, runs, wait_ms)
    tool = Tool(f"waits {wait_ms:g} ms", wait_ms, runs)
    folder.mkdir()
    options: tuple[str, ...] = ()
    if processes == 1:
        handler, options = ASYNC_HANDLER, ("--concurrency", str(in_flight))
    else:  # today's worker: one run at a time, a plain handler
        handler = "_workers.agent:handle"
    with store.fresh(folder.name) as url:
        fleet = run_fleet(url, processes, tool, folder, store.server_cpu, handler, options)
    return line_of(store, processes, in_flight, tool, fleet, floor)


@dataclass
class FleetReport:
    settings: FleetSettings
    machine: Machine
    started: str
    seconds: float = 0.0
    load_start: str = field(default_factory=load_average)
    load_end: str = ""
    lines: list[Line] = field(default_factory=list)


def run_fleet_benchmark(
    settings: FleetSettings, stores: list[Store], folder: Path, log: Log
) -> FleetReport:
    report = FleetReport(settings, describe_machine(folder), time.strftime("%Y-%m-%d %H:%M %Z"))
    start = time.perf_counter()
    for store in stores:
        wait, held = settings.wait_ms, settings.held
        # The quiet reference of "÷ 1 run in flight's": one run at a time whose tool
        # returns at once. With the 20 ms tool, each run's wait left the process idle long
        # enough for its caches to go cold, which doubled its CPU per effect and made every
        # ratio to it read better than it was.
        shapes = [(1, 1, 0.0, runs_for(settings, 1))]
        shapes += [(1, n, wait, runs_for(settings, n)) for n in settings.in_flight]
        shapes.append((settings.processes, 1, wait, runs_for(settings, settings.processes)))
        if held:
            shapes.append((1, held, settings.held_wait_ms, held))
        for processes, in_flight, wait_ms, runs in shapes:
            name = f"fleet-{store.name}-{processes}x{in_flight}-{wait_ms:g}"
            label = re.sub(r"\W+", "-", name).lower()
            line = measure(store, processes, in_flight, wait_ms, runs, folder / label)
            report.lines.append(line)
            log(
                f"{store.name} {processes} process(es) x {in_flight} in flight, "
                f"tool {wait_ms:g} ms: "
                f"{line.effects_per_s:.0f} effects/s (bare loop {line.floor.effects_per_s:.0f}), "
                f"at most {line.most_in_flight} in flight, "
                f"{line.cpu_ms_per_effect:.2f} ms CPU per effect, {line.mib_per_run:.2f} MiB "
                f"per run; CPU busy {line.machine_busy:.0%}"
            )
    report.seconds = time.perf_counter() - start
    report.load_end = load_average()
    return report


COLUMNS = (
    "worker processes x runs in flight", "most in flight at once", "effects/s",
    "÷ bare loop's", "CPU ms per effect", "÷ 1 run in flight's", "of which the workers'",
    "MiB per run", "machine CPU busy",
)  # fmt: skip


def render_fleet(report: FleetReport) -> str:
    m, s = report.machine, report.settings
    quick = " --quick" if s.quick else ""
    out = [
        f"Generated by `python bench/workers.py --fleet{quick}` on {report.started} in "
        f"{report.seconds:.0f} s: {m.cpus} CPUs ({m.cpu_model}), Python {m.python}, "
        f"load average at start / end {report.load_start} / {report.load_end} (the machine "
        "is shared: the load is other work).\n",
        f"Each run is {EFFECTS_PER_RUN} effects whose tool awaits {s.wait_ms:g} ms; "
        f"N x {s.waves} runs (at least {s.min_runs}) per measurement, on a fresh ledger. "
        "*÷ bare loop's*: effects/s over those of a bare asyncio loop with as many tasks "
        "doing the same sleeps, measured right before (1.00 is the floor). *CPU ms per "
        "effect*: the worker processes' CPU after all started, plus the PostgreSQL "
        "server's where it runs here, over the effects; *of which the workers'*: their "
        "processes' alone, which no other work on the machine enters. *÷ 1 run in flight's*: "
        "over the CPU per effect of the first line, one run at a time whose tool returns at "
        "once (a quiet reference: no wait for caches to go cold in). *MiB per run*: one process's "
        "growth in resident memory from the start to its peak (sampled every 50 ms), over "
        "the most runs it held at once; for single-run processes, each process's peak. "
        "*Most in flight at once*: runs inside their handler together in one process.\n",
    ]
    if s.held:
        out.append(
            f"The last line of each table holds {s.held} runs (one wave) whose tool waits "
            f"{s.held_wait_ms / 1000:g} s, so that the process is not short of CPU: its "
            "effects/s over the bare loop's is what holding the runs costs.\n"
        )
    for store in dict.fromkeys(line.store for line in report.lines):
        lines = [line for line in report.lines if line.store == store]
        single = next(line for line in lines if line.wait_ms == 0)
        if single.cpu_ms_per_effect <= 0:
            raise SystemExit(f"{store}: the quiet reference's CPU per effect is impossible")
        server = (
            " (CPU includes every process of the PostgreSQL server here, whoever it worked for)"
            if single.server_measured
            else ""
        )
        out += [f"**{store}**{server}\n", "| " + " | ".join(COLUMNS) + " |"]
        out.append("|" + "---|" * len(COLUMNS))
        for line in lines:
            slow = "" if line.wait_ms == s.wait_ms else f" (tool {line.wait_ms / 1000:g} s)"
            slow = " (tool 0 ms: the reference)" if line.wait_ms == 0 else slow
            out.append(
                f"| {line.processes} x {line.in_flight}{slow} | {line.most_in_flight} | "
                f"{line.effects_per_s:.0f} | "
                f"{line.effects_per_s / line.floor.effects_per_s:.2f} | "
                f"{line.cpu_ms_per_effect:.2f} | "
                f"{line.cpu_ms_per_effect / single.cpu_ms_per_effect:.2f} | "
                f"{line.worker_cpu_ms_per_effect:.2f} | "
                f"{line.mib_per_run:.2f} | {line.machine_busy:.0%} |"
            )
        out.append("")
    return "\n".join(out)


def write_fleet_doc(path: Path, block: str) -> None:
    write_block(path, "fleet", block, "fleet: many runs in flight in one worker process")
