"""A restart after a kill against a clean restart: the same run of N recorded steps
entered again and every step asked for again, once from the files a killed process left
(its WAL beside the ledger), once from the same ledger closed cleanly.

    python bench/resume_after_kill.py [--steps 100000] [--reps 3] [--baseline TREE]
                                      [--dir DIR] [--write docs/benchmarks.md]

For each tree (this one, and with ``--baseline`` another checkout's ``src``), a child
process records a run of N effects (durability ``process``) and kills itself with
SIGKILL after the last one; the files it left (ledger, WAL, the damage check's stamp) are
kept aside. Then, taking turns, each repetition restores those files and times a fresh
process that opens the ledger and replays the run (``ledger.run`` + ``run.effect`` per
step, the tool never called: checked), and times the same on the ledger that a clean
resume closed. Reported per tree: the open, the replay and the whole resume (median of
the repetitions, in the child's own clock), the ratio of after a kill to clean, and, with
a baseline, this tree over the baseline. An impossible figure (a time of zero or less)
fails the run instead of being printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _blocks import write_block
from _overhead.machine import load_average

HERE = Path(__file__).resolve().parent
SUFFIXES = ("", "-wal", "-checked")  # what a killed process leaves (the -shm is rebuilt)

_RECORD = """
import os, signal, sys, oncelog
ledger = oncelog.open(sys.argv[1], durability="process")
send = ledger.tool(kind="create", name="send")(
    lambda to, body, *, idempotency_key: {"id": idempotency_key[-12:]})
with ledger.run("long") as run:
    for i in range(int(sys.argv[2])):
        run.effect(f"s{i}", send, "alice@example.com", f"message {i}")
    os.kill(os.getpid(), signal.SIGKILL)
"""

_RESUME = """
import json, sys, time
began = time.perf_counter()
import oncelog
calls = [0]
def tool(to, body, *, idempotency_key):
    calls[0] += 1
    return {"id": idempotency_key[-12:]}
t0 = time.perf_counter()
ledger = oncelog.open(sys.argv[1], durability="process")
send = ledger.tool(kind="create", name="send")(tool)
t1 = time.perf_counter()
with ledger.run("long") as run:
    for i in range(int(sys.argv[2])):
        run.effect(f"s{i}", send, "alice@example.com", f"message {i}")
t2 = time.perf_counter()
ledger.close()
t3 = time.perf_counter()
if calls[0]:
    sys.exit(f"the replay called the tool {calls[0]} times")
print(json.dumps({"open": t1 - t0, "replay": t2 - t1, "total": t3 - t0}))
"""


def _env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(src)}


def record(src: Path, db: Path, steps: int, aside: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RECORD, str(db), str(steps)],
        env=_env(src), capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != -9:
        raise SystemExit(f"recording in {src} did not end killed: {done.stderr[-2000:]}")
    if not Path(f"{db}-wal").exists():
        raise SystemExit(f"the killed recording in {src} left no WAL: nothing to measure")
    aside.mkdir()
    for suffix in SUFFIXES:
        if Path(f"{db}{suffix}").exists():
            shutil.copy2(f"{db}{suffix}", aside / f"ledger.db{suffix}")


def restore(aside: Path, db: Path) -> None:
    for suffix in (*SUFFIXES, "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
        kept = aside / f"ledger.db{suffix}"
        if kept.exists():
            shutil.copy2(kept, f"{db}{suffix}")


def resume(src: Path, db: Path, steps: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _RESUME, str(db), str(steps)],
        env=_env(src), capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"a resume in {src} failed: {done.stderr[-2000:]}")
    times = {k: float(v) * 1000 for k, v in json.loads(done.stdout).items()}
    if min(times.values()) <= 0:
        raise SystemExit(f"impossible time from {src}: {times}")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout's src, beside")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where files go")
    parser.add_argument("--write", type=Path, help="update this benchmark's block of this file")
    args = parser.parse_args(argv)
    trees = {"this tree": HERE.parent / "src"}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    for src in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    load = [load_average()]
    folder = Path(tempfile.mkdtemp(prefix="oncelog-resume-", dir=args.dir))
    began = time.perf_counter()
    try:
        files = {}
        for name, src in trees.items():
            work = folder / name.replace(" ", "-")
            work.mkdir()
            files[name] = (work / "ledger.db", work / "killed")
            record(src, files[name][0], args.steps, files[name][1])
            print(f"[{time.perf_counter() - began:5.0f}s] {name}: recorded", file=sys.stderr)
        times: dict[tuple[str, str], list[dict[str, float]]] = {}
        for _ in range(args.reps):
            for name, src in trees.items():
                db, aside = files[name]
                restore(aside, db)
                times.setdefault((name, "after a kill"), []).append(resume(src, db, args.steps))
                resume(src, db, args.steps)  # closed cleanly: stamped whole
                times.setdefault((name, "clean"), []).append(resume(src, db, args.steps))
            print(f"[{time.perf_counter() - began:5.0f}s] a repetition", file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    load.append(load_average())

    def median(name: str, case: str, part: str) -> float:
        return statistics.median(t[part] for t in times[(name, case)])

    lines = [
        f"Generated by `python bench/resume_after_kill.py --steps {args.steps} --reps "
        f"{args.reps}{' --baseline ...' if args.baseline else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, files under `{args.dir}`; load average "
        f"{load[0]} at start, {load[1]} at end. A run of {args.steps:,} recorded steps "
        "entered again in a fresh process, every step asked for again (the tool never "
        "called); medians of the repetitions, ms.",
        "",
        "| tree | resume | open ms | replay ms | total ms | after a kill / clean |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in trees:
        clean = median(name, "clean", "total")
        for case in ("clean", "after a kill"):
            total = median(name, case, "total")
            lines.append(
                f"| {name} | {case} | {median(name, case, 'open'):.1f} | "
                f"{median(name, case, 'replay'):.1f} | {total:.1f} | {total / clean:.2f}x |"
            )
    if args.baseline is not None:
        for case in ("clean", "after a kill"):
            ratio = median("this tree", case, "total") / median("baseline", case, "total")
            lines.append(f"\nThis tree over the baseline, {case}: {ratio:.2f}x.")
    killed = median("this tree", "after a kill", "total") / median("this tree", "clean", "total")
    verdict = "**met**" if killed <= 1.1 else "**missed**"
    lines.append(
        f"\nTarget: a resume after a kill within 1.1x a clean one: {killed:.2f}x, {verdict}."
    )
    block = "\n".join(lines) + "\n"
    print(block)
    if args.write:
        write_block(args.write, "resume_after_kill", block, "Resume after a kill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
