"""The operator's side of the process tests: the ``oncelog`` command, run as a person would."""

from __future__ import annotations

from .launch import run_python


def oncelog_cli(db_path: str, *args: str) -> str:
    """Run ``oncelog ARGS --db DB_PATH`` in its own process; its output, or an error."""
    return run_python("-m", "oncelog", *args, "--db", db_path, check=True).stdout
