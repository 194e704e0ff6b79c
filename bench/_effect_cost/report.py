"""``bench/effect_cost.py``'s Markdown: one table per ledger state, the disk and tmpfs
side by side, each figure of oncelog beside its floor's and their ratio; then the
targets, met or missed."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .timing import Batches

# Issue 42's goals: CPU over the floor's on each place, and on a fast fsync (tmpfs stands
# for it) the mean wall; instructions over the floor's; and, per effect, WAL frames in a
# used ledger and bytes stored.
CPU_TARGETS = {"disk": 2.0, "tmpfs": 2.5}
FAST_WALL_TARGET = 1.5
INSTRUCTIONS_TARGET = 3.0
FRAMES_TARGET = 4.0
BYTES_TARGET = 1000.0


@dataclass
class Results:
    header: str
    places: list[str]
    states: list[str]
    timing: dict[tuple[str, str], dict[str, Batches]] = field(default_factory=dict)
    instructions: dict[str, dict[str, float]] = field(default_factory=dict)  # by state
    instructions_note: str = ""
    syscalls: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    syscalls_note: str = ""
    wal: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)


def _ratios(measured: dict[str, Batches], what: str) -> float:
    """The median over repetitions of each repetition's ratio: both sides' batches of one
    repetition ran in the same seconds of the machine's life."""
    ours: list[float] = getattr(measured["ours"], what)
    floor: list[float] = getattr(measured["floor"], what)
    return statistics.median(o / f for o, f in zip(ours, floor, strict=True))


def _row(name: str, ours: float, floor: float, ratio: float | None, digits: int) -> str:
    shown = ratio if ratio is not None else ours / floor
    return f"{ours:,.{digits}f} | {floor:,.{digits}f} | **{shown:.2f}x**"


def _cells(results: Results, state: str, place: str) -> dict[str, str]:
    cells = {}
    measured = results.timing[(place, state)]
    for what, label in (("mean", "wall, mean us"), ("p50", "wall, p50 us"), ("cpu", "CPU us")):
        ours = statistics.median(getattr(measured["ours"], what))
        floor = statistics.median(getattr(measured["floor"], what))
        cells[label] = _row(label, ours, floor, _ratios(measured, what), 1)
    if state in results.instructions:
        found = results.instructions[state]
        cells["instructions"] = _row("", found["ours"], found["floor"], None, 0)
    sys = results.syscalls.get((place, state))
    if sys:
        for what, label in (("pwrite64", "`pwrite64` calls"), ("bytes", "bytes written"),
                            ("syncs", "fsyncs")):  # fmt: skip
            cells[label] = _row("", sys[f"ours {what}"], sys[f"floor {what}"], None, 2)
    wal = results.wal.get((place, state))
    if wal:
        cells["WAL frames"] = _row("", wal["ours frames"], wal["floor frames"], None, 2)
        cells["bytes stored"] = _row(
            "", wal["ours bytes stored"], max(wal["floor bytes stored"], 1.0), None, 0
        )
    return cells


def render(results: Results) -> str:
    out = [results.header, ""]
    for state in results.states:
        out.append(f"**A {state} ledger**, per effect: oncelog | its floor | ratio\n")
        head = "| per effect | " + " | ".join(
            f"{place}: oncelog | {place}: floor | {place}: ratio" for place in results.places
        )
        out += [head + " |", "|---|" + "---:|" * 3 * len(results.places)]
        by_place = {place: _cells(results, state, place) for place in results.places}
        for label in by_place[results.places[0]]:
            row = " | ".join(by_place[place].get(label, "| |") for place in results.places)
            out.append(f"| {label} | {row} |")
        out.append("")
    notes = [n for n in (results.instructions_note, results.syscalls_note) if n]
    out += notes + ([""] if notes else [])
    out += ["| target | measured | |", "|---|---|---|", *_targets(results)]
    return "\n".join(out) + "\n"


def _verdict(what: str, measured: float, target: float, unit: str = "x") -> str:
    met = "**met**" if measured <= target else "**missed**"
    return f"| {what} at most {target:g}{unit} | {measured:,.2f}{unit} | {met} |"


def _targets(results: Results) -> list[str]:
    rows = []
    for state in results.states:
        for place in results.places:
            measured = results.timing[(place, state)]
            goal = CPU_TARGETS.get(place)
            if goal is not None:
                rows.append(
                    _verdict(
                        f"CPU over the floor's, {state} ledger, {place},",
                        _ratios(measured, "cpu"),
                        goal,
                    )
                )
            if place == "tmpfs":
                rows.append(
                    _verdict(
                        f"mean wall over the floor's with a fast fsync (tmpfs), {state} ledger,",
                        _ratios(measured, "mean"),
                        FAST_WALL_TARGET,
                    )
                )
        found = results.instructions.get(state)
        if found:
            rows.append(
                _verdict(
                    f"instructions over the floor's, {state} ledger,",
                    found["ours"] / found["floor"],
                    INSTRUCTIONS_TARGET,
                )
            )
        wal = results.wal.get((results.places[0], state))
        if wal:
            if state == "used":
                rows.append(
                    _verdict(
                        "WAL frames per effect, used ledger,", wal["ours frames"], FRAMES_TARGET, ""
                    )
                )
            rows.append(
                _verdict(
                    f"bytes stored per effect, {state} ledger,",
                    wal["ours bytes stored"],
                    BYTES_TARGET,
                    " B",
                )
            )
        sys = results.syscalls.get((results.places[0], state))
        if sys:
            rows.append(
                _verdict(
                    f"fsyncs per effect, {state} ledger, (the floor's: {sys['floor syncs']:.2f})",
                    sys["ours syncs"],
                    sys["floor syncs"] * 1.05,
                    "",
                )
            )
    return rows
