"""A process held at a named commit boundary (``ONCELOG_PAUSE_AT``) while the test acts:
the test learns that the process is there from a pipe, instead of sleeping for a time it
guesses, and lets it go on by closing another."""

from __future__ import annotations

import os
import select

PAUSE_ENV = "ONCELOG_PAUSE_AT"
PAUSE_FDS_ENV = "ONCELOG_PAUSE_FDS"


class PausePoint:
    """One pause, for one child process: pass ``env()`` and ``fds()`` to it, call
    ``started()`` once it is started, then ``wait()`` and ``release()``."""

    def __init__(self, point: str) -> None:
        self.point = point  # as ONCELOG_CRASH_AT names one: point[@step][:hit]
        self.reached_read, self.reached_write = os.pipe()
        self.release_read, self.release_write = os.pipe()
        self._open = {*self.fds(), self.reached_read, self.release_write}

    def env(self) -> dict[str, str]:
        fds = f"{self.reached_write},{self.release_read}"
        return {PAUSE_ENV: self.point, PAUSE_FDS_ENV: fds}

    def fds(self) -> tuple[int, int]:
        return self.reached_write, self.release_read

    def started(self) -> None:
        """The child has its ends: close ours, so that its death reads as end of file."""
        self._close(self.reached_write)
        self._close(self.release_read)

    def wait(self, timeout: float) -> int:
        """The pid of the process once it stands at the point; fails if it ended first."""
        ready, _, _ = select.select([self.reached_read], [], [], timeout)
        assert ready, f"no process reached {self.point} within {timeout} s"
        line = b""
        while not line.endswith(b"\n"):
            chunk = os.read(self.reached_read, 64)
            assert chunk, f"the process ended before {self.point}"
            line += chunk
        pid, point = line.decode().split()
        assert self.point.startswith(point), (point, self.point)
        return int(pid)

    def release(self) -> None:
        self._close(self.release_write)

    def close(self) -> None:
        for fd in list(self._open):
            self._close(fd)

    def _close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)
