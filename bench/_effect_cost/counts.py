"""What each side does per effect that no clock sees: instructions (callgrind), system
calls (strace: ``pwrite64`` and the bytes they wrote, ``fdatasync``/``fsync``), and WAL
frames and bytes stored. The first two run the workloads of ``bench/instructions.py`` in
child processes, for two numbers of effects: the difference of the two totals over the
effects between them is one effect's, start-up and warm-up cancelled. Frames are counted
in this process with checkpointing off on both sides."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from _instructions.callgrind import _child, count, run_plain
from _overhead.breakdown import store_connection, wal_frames
from _overhead.floor import Floor
from _overhead.workload import EffectInput

import oncelog

from .timing import TOOL, fill_floor, fill_ledger

# (oncelog's workload, the floor's, what makes each used) by ledger state.
WORKLOADS = {
    "new": (("effects", ""), ("floor_effects", "")),
    "used": (("effects_used", "fill_effects"), ("floor_used", "fill_floor")),
}
_CALL = re.compile(r"^\d+\s+(\w+)\(.*\)\s+=\s+(-?\d+)", re.MULTILINE)


class Impossible(SystemExit):
    """A per-effect figure that cannot be one (zero or less where work is done)."""


def _per_effect(totals: list[float], units: tuple[int, int], what: str) -> float:
    figure = (totals[1] - totals[0]) / (units[1] - units[0])
    if figure <= 0:
        raise Impossible(
            f"{what}: {figure:,.2f} per effect (totals {totals[0]:,.0f} for {units[0]} "
            f"effects, {totals[1]:,.0f} for {units[1]}): the two children's fixed parts "
            "differ, so their difference is no effect's cost"
        )
    return figure


def instructions(src: Path, folder: Path, state: str, units: tuple[int, int]) -> dict[str, float]:
    """Instructions per effect of each side (``ours``, ``floor``) in ``state``."""
    found = {}
    for side, (workload, before) in zip(("ours", "floor"), WORKLOADS[state], strict=True):
        totals: list[float] = []
        for n in units:
            db = folder / f"cg-{workload}-{n}.db"
            if before:
                run_plain(src, before, n, db)
            totals.append(count(src, workload, n, db, db.with_suffix(".callgrind")))
        found[side] = _per_effect(totals, units, f"instructions of {workload}")
    return found


def strace_available() -> bool:
    return shutil.which("strace") is not None


def syscalls(src: Path, folder: Path, state: str, units: tuple[int, int]) -> dict[str, float]:
    """Per effect of each side: ``pwrite64`` calls, the bytes they wrote, and syncs
    (``fdatasync`` and ``fsync``), from ``strace -f`` of the whole child."""
    found: dict[str, float] = {}
    for side, (workload, before) in zip(("ours", "floor"), WORKLOADS[state], strict=True):
        totals: dict[str, list[float]] = {"pwrite64": [], "bytes": [], "syncs": []}
        for n in units:
            db = folder / f"st-{workload}-{n}.db"
            if before:
                run_plain(src, before, n, db)
            command, env = _child(src, workload, n, db)
            out = db.with_suffix(".strace")
            traced = ["strace", "-f", "-qq", "-e", "trace=pwrite64,fdatasync,fsync", "-o", str(out)]
            subprocess.run([*traced, *command], env=env, check=True, capture_output=True)
            calls = _CALL.findall(out.read_text())
            writes = [int(done) for name, done in calls if name == "pwrite64"]
            totals["pwrite64"].append(len(writes))
            totals["bytes"].append(sum(max(w, 0) for w in writes))
            totals["syncs"].append(sum(1 for name, _ in calls if name in ("fdatasync", "fsync")))
        for what, pair in totals.items():
            found[f"{side} {what}"] = _per_effect(pair, units, f"{what} of {workload}")
    return found


def _sizes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def wal_and_bytes(folder: Path, state: str, effects: int, fill: int) -> dict[str, float]:
    """Per effect of each side, checkpointing off: WAL frames appended, and the bytes the
    files (database and WAL) grew by once the WAL is checkpointed into the database."""
    folder.mkdir()
    ours_db, floor_db = folder / "ledger.db", folder / "floor.db"
    if state == "used":
        fill_ledger(ours_db, fill)
        fill_floor(floor_db, fill)
    items = [EffectInput.make("walcount", n) for n in range(effects)]
    found: dict[str, float] = {}
    ledger = oncelog.open(str(ours_db))
    tool = ledger.tool(kind="create", name=TOOL)(
        lambda to, subject, body, *, idempotency_key: {"id": idempotency_key[-16:]}
    )
    floor = Floor(floor_db, "INTENT")
    for side, db, conn in (
        ("ours", ours_db, store_connection(ledger)),
        ("floor", floor_db, floor.connection),
    ):
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        size, frames = _sizes(db), wal_frames(db, page)
        if side == "ours":
            with ledger.run("walcount") as run:
                for item in items:
                    run.effect(item.step_id, tool, **item.kwargs)
        else:
            for item in items:
                floor.effect(item)
        found[f"{side} frames"] = (wal_frames(db, page) - frames) / effects
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        found[f"{side} bytes stored"] = (_sizes(db) - size) / effects
    ledger.close()
    floor.close()
    for name, value in found.items():
        if value <= 0 and "frames" in name:
            raise Impossible(f"{name}: {value} per effect in a {state} ledger")
    return found
