"""Interleaved batches of effects, oncelog's (durability ``intent``) and its floor's (a raw
``sqlite3`` connection: an INSERT committed and its WAL fsynced, an UPDATE committed), in
every place (the disk, tmpfs) and ledger state (new, used) at once: each repetition
visits them all in turn, the two sides alternating, so the machine's drift reaches them
alike. The inputs of every effect (step id, arguments, key, argument and result JSON) are
built before the first batch, the same for both sides (``_overhead.workload``); oncelog's
tool returns the floor's result, already built."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _overhead.floor import Floor
from _overhead.workload import EffectInput

import oncelog

RUN = "effects"
TOOL = "send_email"  # the name the inputs' keys are made with (``_overhead.workload``)


@dataclass(frozen=True)
class Setting:
    place: str  # "disk" or "tmpfs"
    state: str  # "new" or "used"
    folder: Path


@dataclass
class Batches:
    """Per batch: mean and p50 wall (us per effect) and CPU (us per effect)."""

    mean: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, samples_ns: list[int], cpu_s: float) -> None:
        self.mean.append(statistics.fmean(samples_ns) / 1000)
        self.p50.append(statistics.median(samples_ns) / 1000)
        self.cpu.append(cpu_s * 1e6 / len(samples_ns))


@dataclass
class Pair:
    """One setting's two sides, open for the whole measurement."""

    setting: Setting
    ours: Callable[[EffectInput], None]
    floor: Callable[[EffectInput], None]
    close: Callable[[], None]
    items: list[EffectInput]
    measured: dict[str, Batches] = field(
        default_factory=lambda: {"ours": Batches(), "floor": Batches()}
    )


def fill_ledger(path: Path, effects: int) -> None:
    """A used ledger: ``effects`` effects of another run, recorded (durability ``process``)."""
    with oncelog.open(str(path), durability="process") as ledger:
        tool = ledger.tool(kind="create", name=TOOL)(
            lambda to, subject, body, *, idempotency_key: {"id": idempotency_key[-16:]}
        )
        with ledger.run("old") as run:
            for n in range(effects):
                item = EffectInput.make("old", n)
                run.effect(item.step_id, tool, **item.kwargs)


def fill_floor(path: Path, effects: int) -> None:
    floor = Floor(path, "NORMAL")
    for n in range(effects):
        floor.effect(EffectInput.make("old", n))
    floor.close()


def open_pair(setting: Setting, effects: int, fill: int) -> Pair:
    """Both sides of ``setting``, with inputs for ``effects`` effects built."""
    ours_db, floor_db = setting.folder / "ledger.db", setting.folder / "floor.db"
    if setting.state == "used":
        fill_ledger(ours_db, fill)
        fill_floor(floor_db, fill)
    items = [EffectInput.make(RUN, n) for n in range(effects)]
    # The tool is called once per effect, in the inputs' order: it returns each one's
    # result as the floor writes it.
    results = iter([json.loads(item.result_json) for item in items])

    def send_email(to: str, subject: str, body: str, *, idempotency_key: str) -> Any:
        return next(results)

    ledger = oncelog.open(str(ours_db))  # durability intent, the default
    tool = ledger.tool(kind="create", name=TOOL)(send_email)
    context = ledger.run(RUN)
    run = context.__enter__()

    def ours(item: EffectInput) -> None:
        run.effect(item.step_id, tool, **item.kwargs)

    floor = Floor(floor_db, "INTENT")

    def close() -> None:
        context.__exit__(None, None, None)
        ledger.close()
        floor.close()

    return Pair(setting, ours, floor.effect, close, items)


def batch(pair: Pair, side: str, count: int, start: int, keep: bool = True) -> None:
    """``count`` effects of one side, from input ``start``: each side consumes the same
    inputs in the same order, so their rows are the same. ``keep=False``: a warm-up."""
    call = pair.ours if side == "ours" else pair.floor
    samples: list[int] = []
    clock = time.perf_counter_ns
    cpu = time.process_time()
    for item in pair.items[start : start + count]:
        began = clock()
        call(item)
        samples.append(clock() - began)
    if keep:
        pair.measured[side].add(samples, time.process_time() - cpu)


def alternate(pairs: list[Pair], reps: int, count: int, warm: int) -> None:
    """A warm-up of ``warm`` effects per side, then ``reps`` rounds: in each, every pair
    in turn (the order rotating), its two sides one after the other (which goes first
    alternating), ``count`` effects each."""
    for pair in pairs:
        for side in ("ours", "floor"):
            batch(pair, side, warm, 0, keep=False)
    for rep in range(reps):
        start = warm + rep * count
        turn = pairs[rep % len(pairs) :] + pairs[: rep % len(pairs)]
        for pair in turn:
            sides = ("ours", "floor") if rep % 2 == 0 else ("floor", "ours")
            for side in sides:
                batch(pair, side, count, start)
