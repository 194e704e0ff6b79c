"""A client-side deadline on every PostgreSQL call: the bound a frozen server cannot keep.

``statement_timeout`` and ``lock_timeout`` are enforced by the server, TCP keepalives and
``tcp_user_timeout`` by the kernels; none of them ends a call to a server whose processes
are stopped (SIGSTOP, a VM paused, a disk hung): its kernel still acknowledges every
packet, so libpq waits for an answer forever. One watchdog thread per process shuts down
the socket of a connection still in a call past its deadline; libpq then finds the
connection closed, psycopg raises, and the store reports ``StoreUnavailable`` (or, cut
during a COMMIT, a commit whose outcome is unknown, never retried).
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


class Guard:
    """One call under a deadline; ``cut`` once the watchdog shut its connection down."""

    __slots__ = ("cut", "deadline", "fileno")

    def __init__(self, fileno: int, deadline: float) -> None:
        self.fileno = fileno
        self.deadline = deadline
        self.cut = False


class Watchdog:
    def __init__(self) -> None:
        self._guards: set[Guard] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        # When the thread wakes next by itself: a guard due later needs no wake-up (every
        # call's deadline is its start plus one timeout, so nearly all of them are later).
        self._wakes_at = 0.0

    @contextmanager
    def guard(self, conn: psycopg.Connection[Any], deadline: float) -> Iterator[Guard]:
        """Cut ``conn`` if the block still runs at ``deadline`` (``time.monotonic``)."""
        guard = self.watch(conn, deadline)
        try:
            yield guard
        finally:
            self.release(guard)

    def watch(self, conn: psycopg.Connection[Any], deadline: float) -> Guard:
        """``guard`` without a context manager, for the calls made most often: cut
        ``conn`` at ``deadline`` unless ``release`` came first."""
        guard = Guard(conn.fileno(), deadline)
        with self._wake:
            self._guards.add(guard)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="oncelog-postgres-deadline", daemon=True
                )
                self._thread.start()
            if deadline < self._wakes_at:
                self._wake.notify()
        return guard

    def release(self, guard: Guard) -> None:
        # Under the lock: once the call is over, its socket (whose number the pool may
        # soon give another connection) is never cut.
        with self._wake:
            self._guards.discard(guard)

    def _loop(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for guard in [g for g in self._guards if g.deadline <= now]:
                    self._guards.discard(guard)
                    guard.cut = True
                    _shut_down(guard.fileno)
                nearest = min((g.deadline for g in self._guards), default=None)
                self._wakes_at = math.inf if nearest is None else nearest
                self._wake.wait(None if nearest is None else nearest - now)


def _shut_down(fileno: int) -> None:
    """Shut the socket down for both directions: a call blocked in poll, recv or send
    on it returns at once. The duplicate descriptor is closed; libpq's stays its own."""
    try:
        with socket.socket(fileno=socket.dup(fileno)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed, or never connected: nothing is waiting on it
        pass


WATCHDOG = Watchdog()
