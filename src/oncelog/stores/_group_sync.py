"""Group commit for SQLite's ``intent`` durability: the fsync of the WAL after a durable
commit, shared by every thread of the process that committed meanwhile.

A committer takes a ticket (``committed``) right after its ``COMMIT``, still under the
store's lock, so every ticket up to it names a commit whose frames the OS already has.
It then waits (``wait``), outside the store's lock: while another thread's
``fdatasync`` is in progress, commits pile up behind it; when it ends, one of them
syncs once for all of them, since an fsync covers every frame written before it. A
committer whose ticket a finished ``fdatasync`` covered returns without one of its own.

A failed ``fdatasync`` fails every ticket it covered, never only its caller's: after
one fails the kernel may have dropped those pages, and the next may succeed without
writing them, so a waiter that tried again and saw success would be told a lie.
"""

from __future__ import annotations

import errno
import os
import threading

_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has only fsync, as SQLite uses there


class GroupSync:
    """One WAL's fsyncs, shared by the threads of one store."""

    def __init__(self, wal_path: str) -> None:
        self._wal_path = wal_path
        self._fd: int | None = None  # opened at the first sync: SQLite keeps the WAL open
        # The mutex entered directly (a C context manager; the Condition's own ``with``
        # runs Python): one run alone pays two lock round trips per durable commit.
        self._mutex = threading.Lock()
        self._turn = threading.Condition(self._mutex)
        self._waiting = 0  # threads asleep on ``_turn``: none, nobody to wake
        # The last ticket handed out: written under the store's lock only, which orders
        # the commits; read here under ``_mutex`` (a ticket read too early is only not
        # covered by that fsync, and its committer waits for the next).
        self._written = 0
        self._settled = 0  # the last ticket a finished fdatasync covered, failed or not
        self._syncing = False
        # (first, last, error) of each failed fdatasync: one per failure, each of which
        # raised to every committer it covered.
        self._failed: list[tuple[int, int, OSError]] = []

    def committed(self) -> int:
        """A ticket for the commit just made; called under the store's lock."""
        self._written += 1
        return self._written

    def wait(self, ticket: int) -> None:
        """Return once an ``fdatasync`` begun after the ticket's commit has ended; raise
        its ``OSError`` if it failed."""
        with self._mutex:
            while self._settled < ticket and self._syncing:
                self._waiting += 1
                self._turn.wait()
                self._waiting -= 1
            if self._settled < ticket:
                self._sync_for_all()
            for first, last, error in self._failed:
                if first <= ticket <= last:  # a fresh error: each thread its own traceback
                    raise OSError(error.errno, error.strerror)

    def _sync_for_all(self) -> None:
        """With ``_mutex`` held: one fdatasync, the lock released during it, covering
        every ticket handed out before it starts."""
        self._syncing = True
        first, last = self._settled + 1, self._written
        error: OSError | None = None
        synced = False
        self._mutex.release()
        try:
            if self._fd is None:
                self._fd = os.open(self._wal_path, os.O_RDWR | os.O_CLOEXEC)
            _fdatasync(self._fd)
            synced = True
        except OSError as exc:
            error = exc
        finally:
            self._mutex.acquire()
            if not synced:  # an OSError, or an interrupt: the tickets fail either way
                error = error or OSError(errno.EINTR, "the fsync was interrupted")
                self._failed.append((first, last, error))
            self._settled, self._syncing = last, False
            if self._waiting:
                self._turn.notify_all()

    def close(self) -> None:
        """Before the store's connection closes: a committer may be between its commit
        and its ``wait`` (it left the store's lock), so what is not yet synced is synced
        now, while the WAL is surely there; its ``wait`` then finds its ticket settled."""
        with self._mutex:
            while self._syncing:
                self._waiting += 1
                self._turn.wait()
                self._waiting -= 1
            if self._settled < self._written:
                self._sync_for_all()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
