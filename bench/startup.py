"""What an agent pays before its first step: ``import oncelog`` and ``oncelog.open(path)``,
against the standard library it needs anyway (``import sqlite3, json, hashlib``); and, for
what an open leaves to the first run, the same with a run of one recorded effect.

    python bench/startup.py [--rounds 21] [--baseline TREE] [--write docs/benchmarks.md]

Each case runs in a fresh interpreter that reports its own CPU time (user and system,
``getrusage``), so the parent's load is not counted; the cases take turns, round after
round, so the drift of a shared machine hits them alike, and the smallest time of each
case is reported with the median beside it. Byte-code caches are written first (``python
-m compileall``), because an installed package has them. ``--baseline`` measures another
checkout's ``src`` in the same rounds, for a before/after in one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _blocks import write_block

_CPU = (
    "\nimport resource as _r\n_u = _r.getrusage(_r.RUSAGE_SELF)\n"
    "print((_u.ru_utime + _u.ru_stime) * 1000)\n"
)
_PASS = "pass"
_TRIO = "import sqlite3, json, hashlib"
_IMPORT = "import oncelog"
_OPEN = "import oncelog, sys\noncelog.open(sys.argv[1]).close()"
_RUN = (
    "import oncelog, sys\nledger = oncelog.open(sys.argv[1])\n"
    "send = ledger.tool(kind='create', name='send')(lambda x, *, idempotency_key: x)\n"
    "with ledger.run('r') as run:\n    run.effect('s', send, 1)\nledger.close()"
)


def _cpu_ms(src: Path | None, code: str, ledger: Path) -> float:
    dropped = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    done = subprocess.run(
        [sys.executable, "-c", code + _CPU, str(ledger)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alike")
    parser.add_argument("--write", type=Path, help="update the startup block of this file")
    args = parser.parse_args(argv)

    here = Path(__file__).resolve().parent.parent / "src"
    trees: dict[str, Path] = {"this tree": here}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve() / "src", **trees}
    for src in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    cases: list[tuple[str, Path | None, str]] = [
        ("`python -c pass`", None, _PASS),
        (f"`{_TRIO}`", None, _TRIO),
    ]
    for name, src in trees.items():
        cases.append((f"`import oncelog` ({name})", src, _IMPORT))
        cases.append((f"`import oncelog; oncelog.open(path).close()` ({name})", src, _OPEN))
        cases.append((f"the same, then a run of one effect, replayed ({name})", src, _RUN))

    folder = Path(tempfile.mkdtemp(prefix="oncelog-startup-", dir="/var/tmp"))
    try:
        ledger = folder / "ledger.db"
        for _, tree, code in cases[2:]:  # the ledger exists, as at every start but the first
            _cpu_ms(tree, code, ledger)
        times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for _ in range(args.rounds):
            for name, tree, code in cases:
                times[name].append(_cpu_ms(tree, code, ledger))
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    floor = min(times[cases[1][0]])
    load = os.getloadavg()[0]
    lines = [
        f"Smallest CPU time of {args.rounds} fresh interpreters per case, taking turns, "
        f"with byte-code caches; Python {sys.version.split()[0]}; load {load:.1f} at the end.",
        "",
        "| | smallest ms | median ms | vs the trio |",
        "|---|---:|---:|---:|",
    ]
    for name, _, _ in cases:
        best, median = min(times[name]), statistics.median(times[name])
        lines.append(f"| {name} | {best:.1f} | {median:.1f} | {best / floor:.2f}x |")
    block = "\n".join(lines) + "\n"
    print(block)
    if args.write:
        write_block(args.write, "startup", block, "Start-up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
