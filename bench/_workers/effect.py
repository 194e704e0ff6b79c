"""One guarded effect on PostgreSQL against its floor, in one process, in alternating
batches. The floor does what durability ``intent`` does on PostgreSQL
(``stores/_postgres.py``: the intent's call commits with ``synchronous_commit = on``, the
outcome's call carries ``set_config('synchronous_commit', 'off', true)`` in its one
statement, so its commit rides on the next flush): on one connection in autocommit, an
INSERT of a row the size of a step row, committed and flushed, then an UPDATE writing its
result whose commit is not flushed (the same ``set_config`` in its statement): two round
trips, one WAL flush. Until issue 42 the floor flushed both commits where oncelog flushes
one, and read better than it was (1.23x where this floor gives 1.13x). Both sides write
the same arguments and result, built before the clock starts. Reported: time per effect
(mean, p50), its ratio to the floor measured in the same repetition, and CPU per effect
of this process and, when the server runs here, of the server; the same for a floor
whose two commits are both flushed, for comparison with earlier figures."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _overhead.machine import load_average
from _overhead.stats import Dist

import oncelog

from . import postgres
from .agent import BODY, send_email
from .floor import COLUMNS, PG_TABLE, row
from .stores import Store

WARM_UP = 30  # effects of each kind before the clock starts (statements prepared)


@dataclass(frozen=True)
class Batch:
    times: Dist  # per effect, microseconds
    worker_cpu_ms: float  # per effect, this process
    server_cpu_ms: float | None  # per effect, the local server's processes


@dataclass(frozen=True)
class EffectComparison:
    guarded: Batch
    floor: Batch
    ratio_mean: float  # guarded / floor, median over the repetitions
    ratio_p50: float
    load: tuple[str, str]  # 1-minute load average at start and end
    reps: int
    batch: int
    both_flushed: Batch  # the floor before issue 42: both commits flushed
    ratio_both_flushed: float  # guarded / that, mean


def _batch(store: Store, calls: Callable[[int], None], count: int) -> tuple[list[int], Batch]:
    server = store.server_cpu
    cpu, served = time.process_time(), server() if server else 0.0
    samples: list[int] = []
    clock = time.perf_counter_ns
    for n in range(count):
        start = clock()
        calls(n)
        samples.append(clock() - start)
    worker = (time.process_time() - cpu) * 1000 / count
    on_server = (server() - served) * 1000 / count if server else None
    return samples, Batch(Dist.of(samples), worker, on_server)


def _median(batches: list[Batch]) -> Batch:
    servers = [b.server_cpu_ms for b in batches if b.server_cpu_ms is not None]
    return Batch(
        Dist.median_of([b.times for b in batches]),
        statistics.median(b.worker_cpu_ms for b in batches),
        statistics.median(servers) if servers else None,
    )


def compare_effect(store: Store, reps: int, batch: int) -> EffectComparison:
    """``reps`` alternations of ``batch`` guarded effects and ``batch`` floor effects."""
    started = load_average()
    with store.fresh("effect") as url, postgres.connect(url) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute(PG_TABLE)
        insert = f"INSERT INTO floor ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        done = "UPDATE floor SET state = 'done', result = %s WHERE id = %s"
        # The outcome's commit not flushed, as oncelog's: the setting is the autocommit
        # transaction's own, in force at its commit and gone after it.
        unflushed = done + " RETURNING set_config('synchronous_commit', 'off', true)"
        rows = [row(n) for n in range(WARM_UP + reps * batch)]
        floor_at, flushed_at = iter(rows), iter(rows)

        def floor(n: int) -> None:
            values = next(floor_at)
            found = conn.execute(insert + " RETURNING id", values).fetchone()
            conn.execute(unflushed, (values[6], found[0])).fetchone()

        def both_flushed(n: int) -> None:
            values = next(flushed_at)
            found = conn.execute(insert + " RETURNING id", values).fetchone()
            conn.execute(done, (values[6], found[0]))

        # The heartbeat would add its commits to the guarded batches: a lease that needs none.
        with oncelog.open(url, lease_ttl=3600) as ledger, ledger.run("effects") as run:
            # The floor's arguments (``_workers.floor.row``: subject ``ticket N resolved``),
            # built before the clock starts as the floor's rows are.
            calls: list[tuple[str, dict[str, Any]]] = [
                (f"email-{n}", {"to": "alice@example.com", "subject": f"ticket {n} resolved",
                                "body": BODY, "wait_ms": 0.0})
                for n in range(len(rows))
            ]  # fmt: skip
            step = iter(calls)

            def guarded(n: int) -> None:
                step_id, kwargs = next(step)
                run.effect(step_id, send_email, **kwargs)

            _batch(store, guarded, WARM_UP)
            _batch(store, floor, WARM_UP)
            _batch(store, both_flushed, WARM_UP)
            measured: dict[str, list[Batch]] = {"guarded": [], "floor": [], "flushed": []}
            ratios: dict[str, list[float]] = {"mean": [], "p50": [], "flushed": []}
            for _ in range(reps):
                _, ours = _batch(store, guarded, batch)
                _, bare = _batch(store, floor, batch)
                _, both = _batch(store, both_flushed, batch)
                measured["guarded"].append(ours)
                measured["floor"].append(bare)
                measured["flushed"].append(both)
                ratios["mean"].append(ours.times.mean / bare.times.mean)
                ratios["p50"].append(ours.times.p50 / bare.times.p50)
                ratios["flushed"].append(ours.times.mean / both.times.mean)
    return EffectComparison(
        _median(measured["guarded"]), _median(measured["floor"]),
        statistics.median(ratios["mean"]), statistics.median(ratios["p50"]),
        (started, load_average()), reps, batch,
        _median(measured["flushed"]), statistics.median(ratios["flushed"]),
    )  # fmt: skip


def render_effect(result: EffectComparison) -> str:
    """The comparison as a Markdown table."""

    def cells(name: str, b: Batch, ratio: str) -> str:
        server = "n/a" if b.server_cpu_ms is None else f"{b.server_cpu_ms:.2f}"
        return (
            f"| {name} | {b.times.mean / 1000:.3f} | {b.times.p50 / 1000:.3f} | {ratio} | "
            f"{b.worker_cpu_ms:.3f} | {server} |"
        )

    ratio = f"{result.ratio_mean:.2f}x mean, {result.ratio_p50:.2f}x p50"
    if result.floor.times.mean <= 0 or result.floor.worker_cpu_ms <= 0:
        raise SystemExit(f"impossible floor (zero or less): {result.floor}")
    return "\n".join([
        f"One effect on PostgreSQL (durability `intent`) against its floor on one connection "
        f"in autocommit: an INSERT committed and flushed, an UPDATE committed unflushed "
        f"(`synchronous_commit` off for its transaction, as oncelog's outcome); "
        f"{result.reps} alternating batches of {result.batch}, medians; load average "
        f"{result.load[0]} at start, {result.load[1]} at end. Against both commits "
        f"flushed (the floor before issue 42): {result.ratio_both_flushed:.2f}x mean.",
        "",
        "| | ms per effect (mean) | ms (p50) | vs floor | worker CPU ms per effect "
        "| server CPU ms per effect |",
        "|---|---:|---:|---:|---:|---:|",
        cells("guarded `run.effect`", result.guarded, ratio),
        cells("floor: INSERT flushed, UPDATE unflushed (2 commits)", result.floor, "1.00x"),
        cells("both commits flushed (for comparison)", result.both_flushed,
              f"{result.ratio_both_flushed:.2f}x"),
    ])  # fmt: skip
