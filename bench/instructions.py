"""What one step costs in CPU instructions, counted by valgrind's callgrind: a number that
does not depend on how busy the machine is, for comparing two trees of oncelog.

    python bench/instructions.py [--baseline OLD_SRC] [--quick] [--write docs/benchmarks.md]

For each workload (``bench/_instructions/workloads.py``: an effect, a model call, a step
of the peers' 20-step agent, a run's start and end, a replayed step), a child process runs
it twice under callgrind, for two numbers of units; the difference of the two totals over
the units between them is the cost of one unit, with start-up, import and warm-up
cancelled out. ``--baseline`` names another tree's ``src`` folder (for example a
``git worktree`` of an earlier commit), measured the same way in the same invocation, and
each figure is shown beside it. Needs valgrind; on SQLite in a fresh directory.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _blocks import write_block
from _instructions.callgrind import count, require_valgrind, run_plain
from _instructions.workloads import WORKLOADS


@dataclass(frozen=True)
class Measure:
    label: str
    workload: str
    units: tuple[int, int]  # the two numbers of units run
    quick: tuple[int, int]
    steps: int = 1  # steps in a unit: the figure is per step
    before: str = ""  # a workload run first, not counted: what the measured one enters


MEASURES = (
    Measure("a SQLite effect, durability `intent`", "effects", (20, 120), (10, 40)),
    Measure("its floor: 1 fsynced + 1 unsynced commit", "floor_effects", (20, 120), (10, 40)),
    Measure(
        "a SQLite effect, in a ledger of 2,000 effects",
        "effects_used",
        (20, 120),
        (10, 40),
        before="fill_effects",
    ),
    Measure(
        "its floor, on a table of 2,000 rows",
        "floor_used",
        (20, 120),
        (10, 40),
        before="fill_floor",
    ),
    Measure("a model call (`run.llm`)", "model_calls", (20, 120), (10, 40)),
    Measure("a step of the peers' 20-step agent (whole runs)", "agent_runs", (2, 12), (1, 4), 20),
    Measure("a run's start and end, no step", "empty_runs", (20, 120), (10, 40)),
    Measure(
        "a replayed step (half effects, half model calls)",
        "replay",
        (2000, 10000),
        (1000, 3000),
        before="record_for_replay",
    ),
)
# Each side of a ratio: (this, its floor), with the same arguments, inputs built outside
# the count alike.
RATIOS = (("effects", "floor_effects"), ("effects_used", "floor_used"))


class ImpossibleFigure(SystemExit):
    """A difference of two totals that cannot be a cost: the fixed part did not cancel."""


def per_unit(src: Path, measure: Measure, units: tuple[int, int], folder: Path) -> float:
    """One unit's instructions: the difference of two children's totals over the units
    between them. A figure of zero or less says the two children did not do the same
    fixed work (an open that reads the whole file in one and not the other, a replay that
    takes a shortcut in one tree): it fails the run rather than be printed."""
    totals = []
    for n in units:
        db = folder / f"{measure.workload}-{n}-{abs(hash(src))}.db"
        if measure.before:
            run_plain(src, measure.before, n, db)
        totals.append(count(src, measure.workload, n, db, db.with_suffix(".callgrind")))
    figure = (totals[1] - totals[0]) / (units[1] - units[0]) / measure.steps
    if figure <= 0:
        raise ImpossibleFigure(
            f"{measure.label} in {src}: {figure:,.0f} instructions per step (totals "
            f"{totals[0]:,} for {units[0]} units, {totals[1]:,} for {units[1]}): the two "
            "children's fixed parts differ, so their difference is not a step's cost"
        )
    return figure


def commit_of(tree: Path) -> str:
    """The commit a tree's folder is checked out at (uncommitted changes not told)."""
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def render(rows: list[tuple[Measure, float, float | None]], header: str) -> str:
    baseline = any(old is not None for _, _, old in rows)
    lines = [header, ""]
    if baseline:
        lines += ["| per step | baseline | this tree | change |", "|---|---:|---:|---:|"]
    else:
        lines += ["| per step | this tree |", "|---|---:|"]
    for measure, new, old in rows:
        if old is None:
            lines.append(f"| {measure.label} | {new:,.0f} |")
        else:
            lines.append(
                f"| {measure.label} | {old:,.0f} | {new:,.0f} | {(new / old - 1) * 100:+.1f} % |"
            )
    found = {measure.workload: (new, old) for measure, new, old in rows}
    lines.append("")
    for ours, floor in RATIOS:
        if ours in found and floor in found:
            (new, old), (floor_new, floor_old) = found[ours], found[floor]
            was = "" if old is None or floor_old is None else f" (baseline {old / floor_old:.2f}x)"
            lines.append(f"- `{ours}` over `{floor}`: **{new / floor_new:.2f}x**{was}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", type=Path, help="another tree's src folder, beside")
    parser.add_argument("--quick", action="store_true", help="fewer units (about a minute)")
    parser.add_argument("--write", type=Path, help="update this benchmark's block of this file")
    parser.add_argument("--dir", type=Path, help="where the databases go (default /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    # A child: one workload, run in this process (bench/_instructions/workloads.py).
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--units", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        WORKLOADS[args.child](args.db, args.units)
        return 0

    from overhead import bench_folder  # imports oncelog: the parent's business only

    require_valgrind()
    src = Path(__file__).resolve().parent.parent / "src"
    began = time.perf_counter()
    rows: list[tuple[Measure, float, float | None]] = []
    with bench_folder(args.dir, args.keep, allow_tmpfs=True) as folder:
        for measure in MEASURES:
            units = measure.quick if args.quick else measure.units
            new = per_unit(src, measure, units, folder)
            old = None if args.baseline is None else per_unit(args.baseline, measure, units, folder)
            rows.append((measure, new, old))
            beside = "" if old is None else f" (baseline {old:,.0f})"
            log = f"[{time.perf_counter() - began:5.0f}s] {measure.label}: {new:,.0f}{beside}"
            print(log, file=sys.stderr)
    beside = "" if args.baseline is None else f", the baseline at `{commit_of(args.baseline)}`"
    header = (
        f"Generated by `python bench/instructions.py{' --quick' if args.quick else ''}"
        f"{' --baseline ...' if args.baseline else ''}` on {time.strftime('%Y-%m-%d %H:%M %Z')}"
        f" (this tree at `{commit_of(src)}`{beside}): callgrind's instructions per step, each the "
        "difference of two child processes' totals over the steps between them "
        "(`PYTHONHASHSEED=0`)."
    )
    block = render(rows, header)
    print(block)
    if args.write:
        write_block(args.write, "instructions", block, "Instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
