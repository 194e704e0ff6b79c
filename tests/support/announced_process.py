"""A server process a test starts and waits for: ready when it prints its announcement
(``oncelog gateway listening on ...``); its output kept by a thread, so that a process
that never announces fails the test after a bound instead of hanging it."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from .launch import environment

ROOT = Path(__file__).resolve().parents[2]
READY_WITHIN = 60.0  # a hang-only bound


class Announced:
    """``argv`` started (in the repository's root unless ``cwd`` says otherwise, in this
    process's environment unless ``env`` is given); ready once a line of its stdout starts
    with ``announcement``."""

    def __init__(
        self,
        argv: Sequence[str],
        announcement: str,
        *,
        cwd: Path = ROOT,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.output: list[str] = []
        self._ready = threading.Event()
        self._announcement = announcement
        self.process = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(environment() if env is None else env), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_WITHIN) or self.process.poll() is not None:
            self.kill()
            raise AssertionError(f"{argv[:4]} did not announce itself: {self.text}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith(self._announcement):
                self._ready.set()
        self._ready.set()  # ended: the waiter sees it has exited

    @property
    def text(self) -> str:
        return "".join(self.output)

    def wait_dead(self, timeout: float = READY_WITHIN) -> int:
        """Its exit status once it has died (by its own crash point)."""
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL, as a machine that loses the process would (and then its pipe closed)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._reader.join(READY_WITHIN)
        if self.process.stdout is not None:
            self.process.stdout.close()
