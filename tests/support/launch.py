"""Starting Python processes for tests, in one place: this interpreter, text output, a
timeout so a hung child fails its test instead of hanging the suite, and a crash point
passed only to the process that is meant to have it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

import pytest

PYTHON = sys.executable
TIMEOUT = 60.0
CRASH_ENV = "ONCELOG_CRASH_AT"

Arg = str | os.PathLike[str]


def python(*args: Arg) -> list[str]:
    """The argv of a process of this interpreter: a script, ``-m module`` or ``-c code``,
    then its arguments."""
    return [PYTHON, *(os.fspath(arg) for arg in args)]


def environment(crash_at: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment with ``extra``, and a crash point only if given."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash_at is not None:
        env[CRASH_ENV] = crash_at
    return {**env, **extra}


def run_python(
    *args: Arg,
    env: Mapping[str, str] | None = None,
    cwd: Arg | None = None,
    timeout: float = TIMEOUT,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a Python process to its end, its output captured as text."""
    return subprocess.run(
        python(*args), env=None if env is None else dict(env), cwd=cwd,
        capture_output=True, text=True, timeout=timeout, check=check,
    )  # fmt: skip


def finish_within(process: subprocess.Popen[str], seconds: float, held: str) -> tuple[str, str]:
    """The output of ``process`` once it ends, or the test failed with ``held`` (what held
    it) if it runs past ``seconds``: a process that hangs is the failure under test."""
    try:
        return process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"{held} after {seconds} s")
