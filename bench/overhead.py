"""What a guarded effect costs, measured against the physical floor in the same run.

    python bench/overhead.py [--quick] [--write docs/benchmarks.md] [--dir DIR]

The physical floor of an effect is two durable commits (the intent before the call, the
outcome after it). This script measures, in one process and on one disk:

1. effects: a guarded ``run.effect`` against the bare tool call and against the floor (a raw
   ``sqlite3`` connection, WAL, doing one INSERT and one UPDATE of a comparable row, each
   in its own committed transaction), for durability ``full`` (``synchronous=FULL``) and
   ``process`` (``synchronous=NORMAL``). Batches of each variant alternate, repeated, so
   the drift of a noisy machine hits all variants alike; the medians over repetitions are
   reported. Then where the guarded path spends its time: per SQL statement, WAL pages
   written, and a cProfile of the Python side.
2. resume: re-entering a recorded run and replaying every step, 20 and 10,000 steps,
   against a raw SELECT of the same rows and against that SELECT plus two durable commits.
3. memory: peak memory (tracemalloc, and resident size, each in a fresh subprocess per
   size) while replaying 1,000 / 10,000 / 100,000 recorded steps, next to a reader that loads
   the whole journal, to show that replay memory stays flat.

Results are ratios against baselines measured in the same run: the machine is noisy, so
nothing here is a timed assertion. ``--write`` replaces the generated block of the given
Markdown file (between the markers below) and keeps the prose around it.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import math
import os
import platform
import pstats
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import oncelog
from oncelog.stores import SQLiteStore

BEGIN_MARK = "<!-- bench:results:begin -->"
END_MARK = "<!-- bench:results:end -->"

TOOL_NAME = "send_email"
RECIPIENT = "alice@example.com"
BODY = "Hello Alice, your ticket 4711 was resolved; reply to this mail to reopen it. " * 2
NS_PER_US = 1_000
NS_PER_MS = 1_000_000

# The targets from the issue.
TARGET_EFFECT_RATIO = 1.3
TARGET_RESUME_20_MS = 5.0
TARGET_RESUME_10K_MS = 200.0
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
    memory_sizes=(1_000, 10_000, 30_000),
    generate="bulk",
)


# -- the tool --------------------------------------------------------------------------


def send_email(to: str, subject: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
    """Pure CPU: the bare call is what Python costs to call a tool, no network."""
    return {"id": "msg_" + idempotency_key[-16:], "to": to, "status": "queued"}


def step_args(n: int) -> dict[str, Any]:
    return {"to": RECIPIENT, "subject": f"ticket {n} resolved", "body": BODY}


def canonical(value: Any) -> str:
    """The ledger's JSON encoding, redone here so the bench needs no private function. If
    the library's encoding ever differs, bulk-recorded rows stop replaying (the argument
    hash no longer matches: ArgumentDrift), so a mismatch cannot go unnoticed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def args_json_of(kwargs: dict[str, Any]) -> str:
    return canonical({"args": [], "kwargs": kwargs})


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class CountingTool:
    """``send_email`` declared on one ledger, counting its real calls: a replay must make
    none, which proves it was a replay and not a re-execution."""

    def __init__(self, ledger: oncelog.Ledger) -> None:
        self.calls = 0

        def tool(to: str, subject: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
            self.calls += 1
            return send_email(to, subject, body, idempotency_key=idempotency_key)

        self.tool: oncelog.Tool[..., dict[str, Any]] = ledger.tool(kind="create", name=TOOL_NAME)(
            tool
        )


def replay(ledger: oncelog.Ledger, tool: CountingTool, run_id: str, steps: int) -> None:
    """Re-enter ``run_id`` and ask for its ``steps`` recorded effects, as a restarted agent."""
    before = tool.calls
    with ledger.run(run_id) as run:
        for i in range(steps):
            run.effect(f"s{i}", tool.tool, **step_args(i))
    if tool.calls != before:
        raise RuntimeError(f"{run_id}: replay called the tool {tool.calls - before} times")


# -- statistics ------------------------------------------------------------------------


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


# -- the machine -----------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    cpus: int
    cpu_model: str
    kernel: str
    python: str
    sqlite: str
    oncelog: str
    directory: str
    filesystem: str
    device: str
    mount_options: str
    write_cache: str


def mount_of(path: Path) -> tuple[str, str, str, str]:
    """(mount point, fs type, device, options) of the mount holding ``path``."""
    best = ("/", "?", "?", "?")
    real = str(path.resolve())
    with open("/proc/mounts") as mounts:
        for line in mounts:
            device, point, fstype, options = line.split()[:4]
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[0]):
                best = (point, fstype, device, options)
    return best


def write_cache_of(device: str) -> str:
    name = Path(device).name.rstrip("0123456789") if device.startswith("/dev/") else ""
    cache = Path("/sys/block") / name / "queue" / "write_cache"
    try:
        return cache.read_text().strip() if name else "?"
    except OSError:
        return "?"


def describe_machine(directory: Path) -> Machine:
    model = "?"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    _, fstype, device, options = mount_of(directory)
    return Machine(
        cpus=len(os.sched_getaffinity(0)),
        cpu_model=model,
        kernel=platform.release(),
        python=platform.python_version(),
        sqlite=sqlite3.sqlite_version,
        oncelog=oncelog.__version__,
        directory=str(directory),
        filesystem=fstype,
        device=device,
        mount_options=options,
        write_cache=write_cache_of(device),
    )


# -- the floor -------------------------------------------------------------------------


class Executes(Protocol):
    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor: ...


def raw_connection(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection set up as the store sets up its own: WAL, autocommit, checked pragmas."""
    db = sqlite3.connect(path, isolation_level=None)
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    db.execute(f"PRAGMA synchronous = {synchronous}")
    got = db.execute("PRAGMA synchronous").fetchone()[0]
    if mode != "wal" or got != {"FULL": 2, "NORMAL": 1}[synchronous]:
        raise RuntimeError(f"{path}: journal_mode={mode}, synchronous={got}")
    return db


class Floor:
    """Two committed transactions per effect, nothing else: one INSERT of the intent row,
    one UPDATE writing the result, rows of the size the ledger writes."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.connection = raw_connection(path, synchronous)
        self.db: Executes = self.connection
        self.connection.execute(
            "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, run_id TEXT, "
            "step_id TEXT, key TEXT, args_hash TEXT, args TEXT, state TEXT, result TEXT, "
            "started_at REAL, finished_at REAL)"
        )

    def effect(self, item: EffectInput) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        row = db.execute(
            "INSERT INTO effects (run_id, step_id, key, args_hash, args, state, started_at) "
            "VALUES (?, ?, ?, ?, ?, 'in_flight', ?)",
            (item.run_id, item.step_id, item.key, item.args_hash, item.args_json, 0.0),
        ).lastrowid
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE effects SET state = 'done', result = ?, finished_at = ? WHERE id = ?",
            (item.result_json, 0.0, row),
        )
        db.execute("COMMIT")


@dataclass(frozen=True)
class EffectInput:
    """Everything about one effect computed before the clock starts, so the floor times
    only its two transactions."""

    run_id: str
    step_id: str
    kwargs: dict[str, Any]
    key: str
    args_json: str
    args_hash: str
    result_json: str

    @staticmethod
    def make(run_id: str, n: int) -> EffectInput:
        step_id = f"email-{n}"
        kwargs = step_args(n)
        key = oncelog.idempotency_key(run_id, step_id, TOOL_NAME)
        args_json = args_json_of(kwargs)
        result_json = canonical(send_email(**kwargs, idempotency_key=key))
        return EffectInput(
            run_id, step_id, kwargs, key, args_json, sha256_hex(args_json), result_json
        )


# -- 1. effects ------------------------------------------------------------------------

VARIANTS = ("floor_full", "guarded_full", "floor_normal", "guarded_process", "bare")


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


def time_batch(call: Callable[[EffectInput], object], items: list[EffectInput]) -> list[int]:
    gc.collect()
    out: list[int] = []
    clock = time.perf_counter_ns
    for item in items:
        start = clock()
        call(item)
        out.append(clock() - start)
    return out


def measure_effects(folder: Path, settings: Settings, log: Callable[[str], None]) -> EffectResults:
    run_id = "overhead"
    # +1: the first batch of every variant is a warm-up and is thrown away.
    items = [EffectInput.make(run_id, n) for n in range((settings.reps + 1) * settings.batch)]
    floor_full = Floor(folder / "floor-full.db", "FULL")
    floor_normal = Floor(folder / "floor-normal.db", "NORMAL")
    full = oncelog.open(str(folder / "guarded-full.db"), durability="full")
    process = oncelog.open(str(folder / "guarded-process.db"), durability="process")
    full_tool, process_tool = CountingTool(full), CountingTool(process)
    with full.run(run_id) as run_full, process.run(run_id) as run_process:
        calls: dict[str, Callable[[EffectInput], object]] = {
            "floor_full": floor_full.effect,
            "guarded_full": lambda i: run_full.effect(i.step_id, full_tool.tool, **i.kwargs),
            "floor_normal": floor_normal.effect,
            "guarded_process": lambda i: run_process.effect(
                i.step_id, process_tool.tool, **i.kwargs
            ),
            "bare": lambda i: send_email(**i.kwargs, idempotency_key=i.key),
        }
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
    floor_full.connection.close()
    floor_normal.connection.close()
    full.close()
    process.close()
    if full_tool.calls != len(items) or process_tool.calls != len(items):
        raise RuntimeError("a guarded effect did not call its tool exactly once")

    ratios = {
        "full_vs_floor": _ratios(per_rep["guarded_full"], per_rep["floor_full"], "mean"),
        "full_vs_floor_p50": _ratios(per_rep["guarded_full"], per_rep["floor_full"], "p50"),
        "process_vs_floor": _ratios(per_rep["guarded_process"], per_rep["floor_normal"], "mean"),
        "process_vs_floor_p50": _ratios(per_rep["guarded_process"], per_rep["floor_normal"], "p50"),
    }
    log("  statement breakdown, WAL pages and profile ...")
    return EffectResults(
        reps=settings.reps,
        batch=settings.batch,
        dists={name: Dist.median_of(d) for name, d in per_rep.items()},
        ratios=ratios,
        breakdown=measure_breakdown(folder, settings.breakdown_effects),
        wal_pages=measure_wal_pages(folder),
        profile=profile_effects(folder, settings.breakdown_effects),
    )


def _ratios(guarded: list[Dist], floor: list[Dist], stat: str) -> list[float]:
    return [getattr(g, stat) / getattr(f, stat) for g, f in zip(guarded, floor, strict=True)]


# -- where the time goes ---------------------------------------------------------------

STATEMENTS = (
    ("BEGIN", "BEGIN IMMEDIATE"),
    ("COMMIT", "COMMIT (the fsync)"),
    ("SELECT owner, fencing_token", "SELECT runs: fence"),
    ("UPDATE runs SET lease_expires_at", "UPDATE runs: lease extension"),
    ("INSERT INTO steps", "INSERT steps: intent row"),
    ("INSERT INTO journal", "INSERT journal: entry"),
    ("UPDATE steps SET state", "UPDATE steps: outcome"),
    ("INSERT INTO effects", "INSERT effects: intent row"),
    ("UPDATE effects", "UPDATE effects: outcome"),
)


class TimedConnection:
    """Wraps a connection and adds up the time of each statement, by kind. Benchmark-only
    instrumentation: it replaces the store's connection object, not the store's code."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._labels: dict[str, str] = {}  # by SQL text: the store reuses its strings
        self.ns: dict[str, int] = {}
        self.count: dict[str, int] = {}

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        start = time.perf_counter_ns()
        try:
            return self._db.execute(sql, parameters)
        finally:
            elapsed = time.perf_counter_ns() - start
            label = self._labels.get(sql) or self._label(sql)
            self.ns[label] = self.ns.get(label, 0) + elapsed
            self.count[label] = self.count.get(label, 0) + 1

    def _label(self, sql: str) -> str:
        flat = " ".join(sql.split())
        label = next((lb for prefix, lb in STATEMENTS if flat.startswith(prefix)), flat[:48])
        self._labels[sql] = label
        return label

    def reset(self) -> None:
        self.ns.clear()
        self.count.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


@dataclass(frozen=True)
class Breakdown:
    effects: int
    guarded_total_us: float
    guarded: dict[str, tuple[float, float]]  # label -> (us per effect, statements per effect)
    floor_total_us: float
    floor: dict[str, tuple[float, float]]


def _per_effect(conn: TimedConnection, n: int) -> dict[str, tuple[float, float]]:
    return {
        label: (conn.ns[label] / n / NS_PER_US, conn.count[label] / n)
        for label in sorted(conn.ns, key=lambda k: -conn.ns[k])
    }


def measure_breakdown(folder: Path, n: int) -> Breakdown:
    """Time each SQL statement of the guarded path (durability full) and of the floor."""
    items = [EffectInput.make("breakdown", i) for i in range(2 * n)]
    ledger = oncelog.open(str(folder / "breakdown.db"), durability="full")
    tool = CountingTool(ledger)
    store = cast(SQLiteStore, ledger.store)
    timed = TimedConnection(store._db)
    setattr(store, "_db", timed)  # noqa: B010 (mypy: the proxy is not a Connection)
    floor = Floor(folder / "breakdown-floor.db", "FULL")
    floor_timed = TimedConnection(floor.connection)
    floor.db = floor_timed
    with ledger.run("breakdown") as run:
        for item in items[:n]:  # warm-up
            run.effect(item.step_id, tool.tool, **item.kwargs)
            floor.effect(item)
        timed.reset()
        floor_timed.reset()
        guarded_ns = floor_ns = 0
        clock = time.perf_counter_ns
        for item in items[n:]:  # alternating, so both see the same machine
            t0 = clock()
            run.effect(item.step_id, tool.tool, **item.kwargs)
            t1 = clock()
            floor.effect(item)
            t2 = clock()
            guarded_ns += t1 - t0
            floor_ns += t2 - t1
        guarded = _per_effect(timed, n)
        floor_rows = _per_effect(floor_timed, n)
    ledger.close()
    floor.connection.close()
    return Breakdown(n, guarded_ns / n / NS_PER_US, guarded, floor_ns / n / NS_PER_US, floor_rows)


def wal_frames(path: Path, page_size: int) -> int:
    """Frames in a WAL file that is never checkpointed (32-byte header, 24 per frame)."""
    wal = Path(str(path) + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - 32) // (page_size + 24)


def measure_wal_pages(folder: Path, n: int = 200) -> dict[str, float]:
    """Database pages each effect appends to the WAL (and so writes and fsyncs)."""
    items = [EffectInput.make("walcount", i) for i in range(n)]
    path = folder / "walcount.db"
    ledger = oncelog.open(str(path), durability="full")
    tool = CountingTool(ledger)
    conn = cast(SQLiteStore, ledger.store)._db
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    with ledger.run("walcount") as run:
        before = wal_frames(path, page_size)
        for item in items:
            run.effect(item.step_id, tool.tool, **item.kwargs)
        guarded = (wal_frames(path, page_size) - before) / n
    ledger.close()
    floor_path = folder / "walcount-floor.db"
    floor = Floor(floor_path, "FULL")
    floor.connection.execute("PRAGMA wal_autocheckpoint = 0")
    before = wal_frames(floor_path, page_size)
    for item in items:
        floor.effect(item)
    floor_frames = (wal_frames(floor_path, page_size) - before) / n
    floor.connection.close()
    return {"guarded": guarded, "floor": floor_frames, "page_size": float(page_size)}


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
    profile = pstats.Stats(profiler).get_stats_profile()
    rows = sorted(profile.func_profiles.items(), key=lambda kv: -kv[1].tottime)[:count]
    return [
        ProfileRow(
            short_name(p.file_name, p.line_number, name),
            int(p.ncalls.partition("/")[0]) / steps,
            p.tottime * 1e6 / steps,
            p.cumtime * 1e6 / steps,
        )
        for name, p in rows
    ]


def profile_effects(folder: Path, n: int) -> list[ProfileRow]:
    ledger = oncelog.open(str(folder / "profile.db"), durability="full")
    tool = CountingTool(ledger)
    items = [EffectInput.make("profile", i) for i in range(n)]
    profiler = cProfile.Profile()
    with ledger.run("profile") as run:
        profiler.enable()
        for item in items:
            run.effect(item.step_id, tool.tool, **item.kwargs)
        profiler.disable()
    ledger.close()
    return top_functions(profiler, n)


# -- recording long runs ---------------------------------------------------------------


def record_run(path: Path, run_id: str, steps: int, how: str) -> float:
    """Record ``steps`` done effects in run ``run_id``; return seconds taken.

    ``ledger``: through ``ledger.run`` with durability ``process`` (the real write path).
    ``bulk``: the same rows in one transaction, in the library's encoding, without
    journal entries (replay never reads the journal). Replay checks both: a row
    that differed in key, step, tool or argument hash would raise, and the tool would be
    called."""
    start = time.perf_counter()
    ledger = oncelog.open(str(path), durability="process")
    tool = CountingTool(ledger)
    if how == "ledger":
        with ledger.run(run_id) as run:
            for i in range(steps):
                run.effect(f"s{i}", tool.tool, **step_args(i))
        ledger.close()
        return time.perf_counter() - start
    with ledger.run(run_id):
        pass  # creates the run row, completed, with no steps
    ledger.close()
    db = raw_connection(path, "NORMAL")
    now = time.time()
    rows: Iterator[tuple[Any, ...]] = (_bulk_row(run_id, i, now) for i in range(steps))
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, "
        "state, result, error, attempts, tokens_in, tokens_out, started_at, finished_at) "
        "VALUES (?, ?, ?, 'effect', ?, 'create', ?, ?, ?, 'done', ?, NULL, 1, 0, 0, ?, ?)",
        rows,
    )
    db.execute("COMMIT")
    db.close()
    return time.perf_counter() - start


def _bulk_row(run_id: str, seq: int, now: float) -> tuple[Any, ...]:
    step_id = f"s{seq}"
    kwargs = step_args(seq)
    key = oncelog.idempotency_key(run_id, step_id, TOOL_NAME)
    args_json = args_json_of(kwargs)
    result = canonical(send_email(**kwargs, idempotency_key=key))
    return (
        run_id,
        seq,
        step_id,
        TOOL_NAME,
        key,
        sha256_hex(args_json),
        args_json,
        result,
        now,
        now,
    )


# -- 2. resume -------------------------------------------------------------------------


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
    db.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
    return time.perf_counter_ns() - start


def raw_floor(db: sqlite3.Connection, run_id: str) -> int:
    """The least a durable resume can do: commit taking the run, read it, commit leaving."""
    start = time.perf_counter_ns()
    touch = "UPDATE runs SET updated_at = ? WHERE run_id = ?"
    db.execute("BEGIN IMMEDIATE")
    db.execute(touch, (time.time(), run_id))
    db.execute("COMMIT")
    db.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
    db.execute("BEGIN IMMEDIATE")
    db.execute(touch, (time.time(), run_id))
    db.execute("COMMIT")
    return time.perf_counter_ns() - start


def measure_resume(path: Path, run_id: str, steps: int, reps: int, open_reps: int) -> ResumeResult:
    ledger = oncelog.open(str(path), durability="full")
    tool = CountingTool(ledger)
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
    with_open: list[int] = []
    for _ in range(open_reps):
        gc.collect()
        start = time.perf_counter_ns()
        opened = oncelog.open(str(path), durability="full")
        replay(opened, CountingTool(opened), run_id, steps)
        opened.close()
        with_open.append(time.perf_counter_ns() - start)
    raw.close()

    def med(i: int) -> float:
        return ms(statistics.median(p[i] for p in phases))

    return ResumeResult(
        steps=steps,
        reps=reps,
        enter_ms=med(0),
        replay_ms=med(1),
        exit_ms=med(2),
        total_ms=med(3),
        with_open_ms=ms(statistics.median(with_open)),
        open_reps=open_reps,
        select_ms=ms(statistics.median(selects)),
        floor_ms=ms(statistics.median(floors)),
    )


def profile_replay(path: Path, run_id: str, steps: int) -> list[ProfileRow]:
    ledger = oncelog.open(str(path), durability="full")
    tool = CountingTool(ledger)
    profiler = cProfile.Profile()
    profiler.enable()
    replay(ledger, tool, run_id, steps)
    profiler.disable()
    ledger.close()
    return top_functions(profiler, steps)


# -- 3. memory -------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryResult:
    steps: int
    record_seconds: float
    replay: dict[str, Any]  # tracemalloc child
    replay_rss: dict[str, Any]  # ru_maxrss child
    load_all: dict[str, Any]
    load_all_rss: dict[str, Any]


def proc_status_kib(field_name: str) -> int:
    """A ``/proc/self/status`` memory field (VmRSS, VmHWM) in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def child_measure(db: str, run_id: str, steps: int, what: str, measure: str) -> dict[str, Any]:
    """In a fresh process: replay ``run_id`` (or load all its steps) and report memory.

    RSS is read from ``VmRSS`` / ``VmHWM`` (this process's own peak). ``ru_maxrss`` is
    reported too but is not used: on Linux it keeps, across ``exec``, the resident size of
    the forked copy of the parent, so a child of a big parent starts with a big peak."""
    ledger = oncelog.open(db, durability="full")
    tool = CountingTool(ledger)
    pages: list[int] = []
    store = ledger.store
    read_page = store.steps

    def counting_steps(run: str, from_seq: int, limit: int) -> list[oncelog.StepRecord]:
        rows = read_page(run, from_seq, limit)
        pages.append(len(rows))
        return rows

    setattr(store, "steps", counting_steps)  # noqa: B010 (count the pages replay reads)
    gc.collect()
    rss_before = proc_status_kib("VmRSS")
    hwm_before = proc_status_kib("VmHWM")
    if measure == "tracemalloc":
        tracemalloc.start()
    start = time.perf_counter()
    if what == "replay":
        replay(ledger, tool, run_id, steps)
    else:
        loaded = ledger.steps(run_id)
        if len(loaded) != steps:
            raise RuntimeError(f"{run_id}: {len(loaded)} steps recorded, expected {steps}")
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] if measure == "tracemalloc" else None
    hwm_after = proc_status_kib("VmHWM")
    ledger.close()
    return {
        "steps": steps,
        "what": what,
        "measure": measure,
        "seconds": seconds,
        "tracemalloc_peak": peak,
        "rss_before_kib": rss_before,
        "hwm_before_kib": hwm_before,
        "hwm_after_kib": hwm_after,
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "pages": len(pages),
        "largest_page": max(pages, default=0),
        "tool_calls": tool.calls,
    }


def spawn_child(db: Path, run_id: str, steps: int, what: str, measure: str) -> dict[str, Any]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        json.dumps([str(db), run_id, steps, what, measure]),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {what}/{measure} {steps} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["tool_calls"] != 0:
        raise RuntimeError(f"child {what} {steps}: the tool was called {result['tool_calls']}x")
    return result


def measure_memory(
    path: Path, sizes: tuple[int, ...], record_seconds: dict[int, float], log: Callable[[str], None]
) -> list[MemoryResult]:
    out = []
    for steps in sizes:
        run_id = f"steps-{steps}"
        children = {
            (what, measure): spawn_child(path, run_id, steps, what, measure)
            for what in ("replay", "load_all")
            for measure in ("tracemalloc", "rss")
        }
        log(
            f"  {steps} steps: "
            + ", ".join(f"{w}/{m} {c['seconds']:.1f}s" for (w, m), c in children.items())
        )
        out.append(
            MemoryResult(
                steps=steps,
                record_seconds=record_seconds[steps],
                replay=children["replay", "tracemalloc"],
                replay_rss=children["replay", "rss"],
                load_all=children["load_all", "tracemalloc"],
                load_all_rss=children["load_all", "rss"],
            )
        )
    return out


# -- the whole benchmark ---------------------------------------------------------------


def load_average() -> str:
    """1-minute load: other work on the machine shows up here, and in the spreads."""
    return f"{os.getloadavg()[0]:.2f}"


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


def run_benchmark(settings: Settings, folder: Path, log: Callable[[str], None]) -> Report:
    report = Report(settings, describe_machine(folder), time.strftime("%Y-%m-%d %H:%M %Z"))
    start = time.perf_counter()
    log(f"1/3 effects: {settings.reps} reps x {settings.batch} per variant, in {folder}")
    report.effects = measure_effects(folder, settings, log)

    log("2/3 resume: recording runs ...")
    resume_db = folder / "resume.db"
    record_run(resume_db, "steps-20", 20, "ledger")
    replay_db = folder / "replay.db"
    record_seconds = {}
    for steps in sorted({10_000, *settings.memory_sizes}):
        record_seconds[steps] = record_run(replay_db, f"steps-{steps}", steps, settings.generate)
        log(f"  recorded {steps} steps ({settings.generate}) in {record_seconds[steps]:.1f}s")
    report.resume.append(
        measure_resume(
            resume_db, "steps-20", 20, settings.resume20_reps, settings.resume20_open_reps
        )
    )
    log(f"  20 steps: {report.resume[-1].total_ms:.2f} ms")
    report.resume.append(
        measure_resume(
            replay_db,
            "steps-10000",
            10_000,
            settings.resume10k_reps,
            settings.resume10k_open_reps,
        )
    )
    log(f"  10000 steps: {report.resume[-1].total_ms:.1f} ms")
    report.replay_profile = profile_replay(replay_db, "steps-10000", 10_000)

    log("3/3 memory")
    report.memory = measure_memory(replay_db, settings.memory_sizes, record_seconds, log)
    report.seconds = time.perf_counter() - start
    report.load_end = load_average()
    return report


# -- rendering -------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def render(report: Report) -> str:
    effects = report.effects
    assert effects is not None
    m = report.machine
    s = report.settings
    out: list[str] = []
    add = out.append
    add(
        f"Generated by `python bench/overhead.py{' --quick' if s.quick else ''}` "
        f"on {report.started}"
    )
    add(f"in {report.seconds:.0f} s.\n")
    add("| machine | |\n|---|---|")
    add(f"| CPUs available (`nproc`) | {m.cpus} |")
    add(f"| CPU model (/proc/cpuinfo) | {m.cpu_model} |")
    add(f"| kernel | {m.kernel} |")
    add(f"| Python / SQLite / oncelog | {m.python} / {m.sqlite} / {m.oncelog} |")
    add(f"| directory | `{m.directory}` |")
    add(f"| filesystem | {m.filesystem} on {m.device} ({m.mount_options}) |")
    add(f"| device write cache | {m.write_cache} |")
    add(f"| load average at start / end | {report.load_start} / {report.load_end} |")
    add("")

    # Targets first: the reader's question.
    full_ratio = effects.ratio("full_vs_floor")
    r20, r10k = report.resume[0], report.resume[1]
    flat_ok, flat_text = flatness(report.memory)
    add("### Targets\n")
    add("| target | measured | |\n|---|---|---|")
    add(
        f"| guarded effect (durability full) at most {TARGET_EFFECT_RATIO}x the floor "
        f"(mean per effect) | {full_ratio:.2f}x | {verdict(full_ratio <= TARGET_EFFECT_RATIO)} |"
    )
    add(
        f"| resume a 20-step run in-process under {TARGET_RESUME_20_MS:g} ms "
        f"(enter + replay + exit, ledger open) | {r20.total_ms:.2f} ms "
        f"| {verdict(r20.total_ms < TARGET_RESUME_20_MS)} |"
    )
    add(
        f"| resume a 10,000-step run under {TARGET_RESUME_10K_MS:g} ms "
        f"(same) | {r10k.total_ms:.0f} ms | {verdict(r10k.total_ms < TARGET_RESUME_10K_MS)} |"
    )
    add(f"| peak memory flat as the journal grows | {flat_text} | {verdict(flat_ok)} |")
    add("")

    add("### 1. Per-effect overhead\n")
    add(
        f"{s.reps} repetitions; in each, a batch of {s.batch} effects per variant, the "
        "variants alternating in a rotating order (a first, discarded repetition warms up). "
        "Each cell is the median over the repetitions of that batch's statistic, in "
        "microseconds per effect.\n"
    )
    add("| variant | mean us | p50 us | p99 us |\n|---|---:|---:|---:|")
    names = {
        "bare": "bare call: the tool function alone",
        "floor_full": "floor, `synchronous=FULL`: 2 committed txns (INSERT, UPDATE)",
        "guarded_full": "guarded `run.effect`, durability `full`",
        "floor_normal": "floor, `synchronous=NORMAL`",
        "guarded_process": "guarded `run.effect`, durability `process`",
    }
    for name in ("bare", "floor_full", "guarded_full", "floor_normal", "guarded_process"):
        d = effects.dists[name]
        add(f"| {names[name]} | {d.mean:.1f} | {d.p50:.1f} | {d.p99:.1f} |")
    add("")
    add("| ratio (median over repetitions, min - max) | mean | p50 |\n|---|---:|---:|")
    for label, key in (
        ("guarded full / floor FULL", "full_vs_floor"),
        ("guarded process / floor NORMAL", "process_vs_floor"),
    ):
        mean_r, p50_r = effects.ratios[key], effects.ratios[key + "_p50"]
        add(
            f"| {label} | {statistics.median(mean_r):.2f}x "
            f"({min(mean_r):.2f} - {max(mean_r):.2f}) | {statistics.median(p50_r):.2f}x "
            f"({min(p50_r):.2f} - {max(p50_r):.2f}) |"
        )
    dist = effects.dists
    extra_full = dist["guarded_full"].mean - dist["floor_full"].mean
    extra_process = dist["guarded_process"].mean - dist["floor_normal"].mean
    add("")
    add(
        f"Above the floor, a guarded effect costs {extra_full:.0f} us (durability full) and "
        f"{extra_process:.0f} us (process); the bare call costs {dist['bare'].mean:.2f} us.\n"
    )

    add("#### Where the time of a guarded effect goes (durability full)\n")
    b = effects.breakdown
    add(
        f"Each SQL statement timed through a wrapper around the store's connection, "
        f"{b.effects} effects after as many warm-up ones, guarded and floor alternating; the "
        "rest is Python. The wrapper itself adds about 1 us per statement (counted in the "
        f"Python rows). Total: guarded {b.guarded_total_us:.0f} us per effect, floor "
        f"{b.floor_total_us:.0f} us.\n"
    )
    add("| path | part | us per effect | statements per effect |\n|---|---|---:|---:|")
    for who, total, parts in (
        ("guarded", b.guarded_total_us, b.guarded),
        ("floor", b.floor_total_us, b.floor),
    ):
        for label, (us, count) in parts.items():
            add(f"| {who} | {label} | {us:.1f} | {count:g} |")
        python = total - sum(us for us, _ in parts.values())
        add(f"| {who} | Python around the statements (and the tool) | {python:.1f} | |")
    wal = effects.wal_pages
    add("")
    add(_above_floor(b) + "\n")
    add(
        f"WAL pages appended per effect ({wal['page_size']:.0f}-byte pages, autocheckpoint "
        f"off, {200} effects): guarded {wal['guarded']:.1f}, floor {wal['floor']:.1f}. "
        "Every page is written to the WAL before the fsync and later copied into the "
        "database by a checkpoint, which is also fsynced under `synchronous=FULL`.\n"
    )
    add(
        f"cProfile of {b.effects} guarded effects (durability full), top functions by own "
        "time, per effect (cProfile inflates Python calls; read the shares, not the sums):\n"
    )
    add(profile_table(effects.profile))

    add("### 2. Resume\n")
    add(
        "A recorded, completed run is entered again and every step is asked for again; the "
        "tool is never called (checked). *enter* is `ledger.run(...).__enter__` (takes the "
        "lease: one durable commit), *replay* the steps, *exit* records the run's end (one "
        "durable commit). Ledger open excluded unless stated. Baselines on the same file, "
        "same run: a raw `SELECT * FROM steps WHERE run_id = ? ORDER BY seq` (fetchall), and "
        "the floor of a durable resume: that SELECT between two committed UPDATEs "
        "(`synchronous=FULL`). Medians.\n"
    )
    add(
        "| steps | reps | enter ms | replay ms | exit ms | **total ms** | us/step (replay) "
        "| with `oncelog.open` + close ms | raw SELECT ms | SELECT + 2 commits ms "
        "| total / SELECT | total / floor |"
    )
    add("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in report.resume:
        add(
            f"| {r.steps:,} | {r.reps} | {r.enter_ms:.2f} | {r.replay_ms:.2f} | {r.exit_ms:.2f} "
            f"| **{r.total_ms:.2f}** | {r.us_per_step:.1f} | {r.with_open_ms:.2f} "
            f"({r.open_reps} reps) | {r.select_ms:.3f} | {r.floor_ms:.3f} "
            f"| {r.total_ms / r.select_ms:.0f}x | {r.total_ms / r.floor_ms:.1f}x |"
        )
    add("")
    add("cProfile of one replay of the 10,000-step run, top functions by own time, per step:\n")
    add(profile_table(report.replay_profile))

    add("### 3. Memory while replaying\n")
    how = (
        "recorded through `ledger.run` with durability `process`"
        if s.generate == "ledger"
        else "inserted in one transaction in the library's encoding (`--quick`)"
    )
    add(
        f"Runs {how}. Each number comes from a fresh subprocess that opens the ledger and "
        "either replays the whole run (`ledger.run` + `run.effect` per step: the real "
        "replay path) or, for contrast, loads all its steps at once (`ledger.steps`). "
        "*tracemalloc peak* is the peak of Python allocations during that call; *RSS* is "
        "the process's resident size (`VmRSS`) before the call and its peak (`VmHWM`) after "
        "it, from a second child without tracemalloc; `ru_maxrss` is not used because on "
        "Linux it carries the parent's resident size at fork across `exec`, so every child "
        "of this (large) benchmark process would start at the parent's size. *pages* counts "
        "the store reads the replay cursor made.\n"
    )
    add(
        "| steps | recorded in s | replay: tracemalloc peak MiB | replay: RSS before -> peak "
        "MiB | replay s | pages read (largest) | load all: tracemalloc peak MiB "
        "| load all: RSS before -> peak MiB |"
    )
    add("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mem in report.memory:
        rp, rr, la, lr = mem.replay, mem.replay_rss, mem.load_all, mem.load_all_rss
        add(
            f"| {mem.steps:,} | {mem.record_seconds:.1f} | {mib(rp['tracemalloc_peak']):.2f} "
            f"| {rss_text(rr)} | {rr['seconds']:.2f} | {rp['pages']} ({rp['largest_page']}) "
            f"| {mib(la['tracemalloc_peak']):.2f} | {rss_text(lr)} |"
        )
    add("")
    add(
        f"Flat means: the replay's tracemalloc peak at the largest size is at most "
        f"{FLAT_FACTOR}x the peak at the smallest, and its RSS growth at most "
        f"{FLAT_RSS_KIB // 1024} MiB more. Measured: {flat_text}.\n"
    )
    return "\n".join(out) + "\n"


def rss_growth_kib(child: dict[str, Any]) -> int:
    return int(child["hwm_after_kib"]) - int(child["rss_before_kib"])


def rss_text(child: dict[str, Any]) -> str:
    return f"{child['rss_before_kib'] / 1024:.1f} -> {child['hwm_after_kib'] / 1024:.1f}"


def _above_floor(b: Breakdown) -> str:
    """Split what a guarded effect costs above the floor into commits, statements, Python."""
    commit = "COMMIT (the fsync)"

    def parts(rows: dict[str, tuple[float, float]], total: float) -> tuple[float, float, float]:
        commits = rows.get(commit, (0.0, 0.0))[0]
        statements = sum(us for label, (us, _) in rows.items() if label != commit)
        return commits, statements, total - commits - statements

    g = parts(b.guarded, b.guarded_total_us)
    f = parts(b.floor, b.floor_total_us)
    return (
        f"Of the {b.guarded_total_us - b.floor_total_us:.0f} us a guarded effect costs above "
        f"the floor here: COMMITs {g[0] - f[0]:+.0f} us (more pages per commit, more "
        f"checkpoints), the other statements {g[1] - f[1]:+.0f} us, Python "
        f"{g[2] - f[2]:+.0f} us."
    )


def mib(n: int | None) -> float:
    return (n or 0) / (1 << 20)


def flatness(memory: list[MemoryResult]) -> tuple[bool, str]:
    small, large = memory[0], memory[-1]
    peak_small = small.replay["tracemalloc_peak"]
    peak_large = large.replay["tracemalloc_peak"]
    rss_small = rss_growth_kib(small.replay_rss)
    rss_large = rss_growth_kib(large.replay_rss)
    factor = peak_large / peak_small
    text = (
        f"replay peak {mib(peak_small):.2f} MiB at {small.steps:,} steps, "
        f"{mib(peak_large):.2f} MiB at {large.steps:,} ({factor:.2f}x); RSS growth "
        f"{rss_small / 1024:.1f} -> {rss_large / 1024:.1f} MiB"
    )
    return factor <= FLAT_FACTOR and rss_large - rss_small <= FLAT_RSS_KIB, text


def profile_table(rows: list[ProfileRow]) -> str:
    lines = ["| function | calls | own us | cumulative us |", "|---|---:|---:|---:|"]
    lines += [
        f"| `{r.function}` | {r.calls_per_step:g} | {r.tottime_us:.1f} | {r.cumtime_us:.1f} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def write_doc(path: Path, block: str) -> None:
    """Replace the generated block of ``path``, keeping everything around it."""
    generated = f"{BEGIN_MARK}\n{block}{END_MARK}\n"
    text = path.read_text() if path.exists() else ""
    if BEGIN_MARK in text and END_MARK in text:
        head = text.partition(BEGIN_MARK)[0]
        tail = text.partition(END_MARK)[2].lstrip("\n")
        text = head + generated + (("\n" + tail) if tail else "")
    else:
        text = (text or "# Benchmarks\n") + "\n## Results\n\n" + generated
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- entry point -----------------------------------------------------------------------


@contextmanager
def bench_folder(base: Path | None, keep: bool, allow_tmpfs: bool) -> Iterator[Path]:
    root = base or Path("/var/tmp")
    fstype = mount_of(root)[1]
    if fstype in ("tmpfs", "ramfs") and not allow_tmpfs:
        raise SystemExit(
            f"{root} is on {fstype}: fsync costs nothing there, so the floor means nothing. "
            "Pick a directory on a real disk with --dir (or pass --allow-tmpfs)."
        )
    folder = Path(tempfile.mkdtemp(prefix="oncelog-bench-", dir=root))
    try:
        yield folder
    finally:
        if keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 1 minute)")
    parser.add_argument("--write", type=Path, help="update the results block of this file")
    parser.add_argument("--dir", type=Path, help="where the databases go (default /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--allow-tmpfs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        db, run_id, steps, what, measure = json.loads(args.child)
        print(json.dumps(child_measure(db, run_id, int(steps), what, measure)))
        return 0

    began = time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - began:5.1f}s] {line}", file=sys.stderr, flush=True)

    settings = QUICK if args.quick else FULL
    with bench_folder(args.dir, args.keep, args.allow_tmpfs) as folder:
        report = run_benchmark(settings, folder, log)
    block = render(report)
    print(block)
    if args.write:
        write_doc(args.write, block)
        log(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
