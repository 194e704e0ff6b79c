"""One guarded effect on PostgreSQL against its floor, in one process, in alternating
batches: the floor is two bare commits on one connection (an INSERT of a row the size of a
step row, then an UPDATE writing its result, each its own autocommit transaction with
``synchronous_commit = on``): two round trips and two WAL flushes, what any effect that is
recorded before and after its call must pay. Reported: time per effect (mean, p50), its
ratio to the floor measured in the same repetition, and CPU per effect of this process
and, when the server runs here, of the server."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

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
        rows = [row(n) for n in range(WARM_UP + reps * batch)]
        floor_at = iter(rows)

        def floor(n: int) -> None:
            values = next(floor_at)
            found = conn.execute(insert + " RETURNING id", values).fetchone()
            conn.execute(done, (values[6], found[0]))

        # The heartbeat would add its commits to the guarded batches: a lease that needs none.
        with oncelog.open(url, lease_ttl=3600) as ledger, ledger.run("effects") as run:
            step = iter(range(len(rows)))

            def guarded(n: int) -> None:
                run.effect(
                    f"email-{next(step)}", send_email, to="alice@example.com",
                    subject=f"ticket {n} resolved", body=BODY, wait_ms=0.0,
                )  # fmt: skip

            _batch(store, guarded, WARM_UP)
            _batch(store, floor, WARM_UP)
            measured: dict[str, list[Batch]] = {"guarded": [], "floor": []}
            ratios: dict[str, list[float]] = {"mean": [], "p50": []}
            for _ in range(reps):
                _, ours = _batch(store, guarded, batch)
                _, bare = _batch(store, floor, batch)
                measured["guarded"].append(ours)
                measured["floor"].append(bare)
                ratios["mean"].append(ours.times.mean / bare.times.mean)
                ratios["p50"].append(ours.times.p50 / bare.times.p50)
    return EffectComparison(
        _median(measured["guarded"]), _median(measured["floor"]),
        statistics.median(ratios["mean"]), statistics.median(ratios["p50"]),
        (started, load_average()), reps, batch,
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
    return "\n".join([
        f"One effect on PostgreSQL against two bare autocommit commits on one connection: "
        f"{result.reps} alternating batches of {result.batch}, medians; load average "
        f"{result.load[0]} at start, {result.load[1]} at end.",
        "",
        "| | ms per effect (mean) | ms (p50) | vs floor | worker CPU ms per effect "
        "| server CPU ms per effect |",
        "|---|---:|---:|---:|---:|---:|",
        cells("guarded `run.effect`", result.guarded, ratio),
        cells("floor: INSERT, UPDATE (2 commits)", result.floor, "1.00x"),
    ])  # fmt: skip
