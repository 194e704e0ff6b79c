"""Keeping leases alive while a step runs for longer than the lease.

One daemon thread per process renews every lease this process holds, each a third of its
TTL after the last renewal, so a worker busy in a long call keeps its run while another
worker, on another machine, still takes over within one TTL of this process stopping.
A stopped (SIGSTOP) or partitioned process renews nothing: that is the point.
"""

from __future__ import annotations

import os
import threading
import time

from .._exceptions import LeaseLost, OnceLogError
from .._log import log
from ..stores._protocol import Lease, Store


class _Beat:
    __slots__ = ("due", "lease", "lost", "store")

    def __init__(self, store: Store, lease: Lease) -> None:
        self.store = store
        self.lease = lease
        self.due = time.monotonic() + lease.ttl / 3
        self.lost = False


class Heartbeats:
    def __init__(self) -> None:
        self._start_over()
        # A forked child has no thread of its parent's, and a lock some thread of the
        # parent held stays locked in it: it starts over. It holds none of its parent's
        # leases either: renewing them would keep a killed parent's runs from being taken
        # over for as long as the child lives.
        os.register_at_fork(after_in_child=self._start_over)

    def _start_over(self) -> None:
        self._beats: dict[str, _Beat] = {}
        # A plain lock, taken directly: a run's start and end each take it once, and
        # entering the Condition (a method in Python) costs as much again.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None  # None once it has ended
        # When the thread wakes next by itself (0 while it renews: it looks at every
        # lease before it waits again). A lease due later needs no wake-up, and every
        # lease of one ledger has the same ttl, so a run's lease nearly never does: waking
        # the thread cost each run's start a switch of the GIL and a wait begun again.
        self._wakes_at = 0.0

    def hold(self, store: Store, lease: Lease) -> None:
        """Renew ``lease`` until ``release``."""
        beat = _Beat(store, lease)
        with self._lock:
            self._beats[lease.owner] = beat
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="oncelog-heartbeat", daemon=True
                )
                self._thread.start()
            elif beat.due < self._wakes_at:
                self._wake.notify()

    def release(self, lease: Lease) -> None:
        with self._lock:
            self._beats.pop(lease.owner, None)

    def release_store(self, store: Store) -> None:
        """Stop renewing the leases held through ``store`` (it is being closed)."""
        with self._lock:
            for owner in [o for o, b in self._beats.items() if b.store is store]:
                del self._beats[owner]

    def lost(self, lease: Lease) -> bool:
        """True once a renewal found the run taken over by another worker."""
        beat = self._beats.get(lease.owner)
        return beat is not None and beat.lost

    def _loop(self) -> None:
        try:
            self._beat()
        finally:  # whatever ended it, the next ``hold`` starts another
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _beat(self) -> None:
        while True:
            # The due leases live in the helpers' frames only: while the thread sleeps it
            # refers to no lease, and so to no store, which a process can then collect
            # (closing its connection, and SQLite's WAL with it) at exit.
            self._renew_all(self._due())

    def _due(self) -> list[_Beat]:
        """The leases due for renewal, once there are any: sleeps until then."""
        with self._lock:
            while True:
                now = time.monotonic()
                due = [b for b in self._beats.values() if b.due <= now and not b.lost]
                if due:
                    return due
                # A lost lease is renewed no more: it does not set the next wake-up.
                nearest = min((b.due for b in self._beats.values() if not b.lost), default=now + 60)
                wait = max(nearest - now, 0.01)
                self._wakes_at = now + wait
                self._wake.wait(wait)
                self._wakes_at = 0.0

    def _renew_all(self, due: list[_Beat]) -> None:
        for beat in due:
            self._renew(beat)

    @staticmethod
    def _renew(beat: _Beat) -> None:
        beat.due = time.monotonic() + beat.lease.ttl / 3
        try:
            beat.store.heartbeat(beat.lease)
        except LeaseLost:
            beat.lost = True
        except OnceLogError as exc:  # the store is down: try again at the next beat
            log.warning("lease renewal of run %s failed: %s", beat.lease.run_id, exc)


HEARTBEATS = Heartbeats()
