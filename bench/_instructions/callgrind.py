"""One workload in a child process under callgrind: the instructions it executed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "instructions.py"


def require_valgrind() -> str:
    found = shutil.which("valgrind")
    if found is None:
        raise SystemExit(
            "bench/instructions.py counts instructions with valgrind's callgrind, which is "
            "not installed here (Debian and Ubuntu: apt-get install valgrind)."
        )
    return found


def _child(src: Path, workload: str, units: int, db: Path) -> tuple[list[str], dict[str, str]]:
    # The tree measured comes first on the path, before the installed one; a fixed hash
    # seed keeps dict and set layouts, so the counts repeat from run to run.
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    command = [sys.executable, str(SCRIPT), "--child", workload]
    return [*command, "--units", str(units), "--db", str(db)], env


def run_plain(src: Path, workload: str, units: int, db: Path) -> None:
    """Run a workload without counting (a run to replay is recorded so)."""
    command, env = _child(src, workload, units, db)
    subprocess.run(command, env=env, check=True)


def count(src: Path, workload: str, units: int, db: Path, out: Path) -> int:
    """Instructions the whole child process executed (callgrind's total ``Ir``)."""
    command, env = _child(src, workload, units, db)
    done = subprocess.run(
        [require_valgrind(), "--tool=callgrind", f"--callgrind-out-file={out}", *command],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{workload} ({units} units) failed under callgrind:\n{done.stderr}")
    totals = re.search(r"^(?:summary|totals):\s*(\d+)", out.read_text(), re.MULTILINE)
    if totals is None:
        raise RuntimeError(f"callgrind wrote no total to {out}")
    return int(totals.group(1))
