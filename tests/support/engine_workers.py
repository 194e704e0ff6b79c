"""Engine worker processes (a Celery worker, a DBOS or Temporal test program) started
against one ledger and one fake provider, with their logs in files read while they run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .launch import python

ROOT = Path(__file__).parent.parent.parent
TIMEOUT = 90.0


def reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Processes:
    """Processes started with one environment (the provider's URL, the ledger's, the
    engine's settings), each logging to its own file in ``directory``; they run in ``cwd``,
    by default the repository's root."""

    def __init__(self, directory: Path, env: dict[str, str], cwd: Path = ROOT) -> None:
        self.directory = directory
        self.cwd = cwd
        self.env = {
            **os.environ,
            "ENGINE_KILL_ARMED": str(directory / "kill-armed"),
            "ENGINE_ENTERED": str(directory / "entered"),
            **env,
        }
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *argv: str) -> subprocess.Popen[str]:
        with (self.directory / f"process-{len(self.started)}.log").open("w") as log:
            process = subprocess.Popen(
                python(*argv), cwd=self.cwd, env=self.env, stdout=log,
                stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        self.started.append(process)
        return process

    def log(self, process: subprocess.Popen[str]) -> str:
        return (self.directory / f"process-{self.started.index(process)}.log").read_text()

    def wait_log(self, process: subprocess.Popen[str], text: str) -> None:
        wait_for(lambda: text in self.log(process), f"{text!r} in:\n{self.log(process)}")

    def arm_kill(self) -> None:
        """The next provider request SIGKILLs its caller right after the effect."""
        (self.directory / "kill-armed").write_text("")

    def wait_entered(self) -> int:
        """The pid of the process inside the provider call."""
        marker = self.directory / "entered"
        wait_for(lambda: marker.exists() and marker.read_text() != "", "a provider call")
        return int(marker.read_text())

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=TIMEOUT)
