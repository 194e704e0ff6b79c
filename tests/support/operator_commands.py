"""The operator's side of the process tests: the ``oncelog`` command, run as a person would."""

from __future__ import annotations

import subprocess
import sys


def oncelog_cli(db_path: str, *args: str) -> str:
    """Run ``oncelog ARGS --db DB_PATH`` in its own process; its output, or an error."""
    done = subprocess.run(
        [sys.executable, "-m", "oncelog", *args, "--db", db_path],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout
