"""Keeping leases alive while a step runs for longer than the lease.

One daemon thread per process renews every lease this process holds, each a third of its
TTL after the last renewal, so a worker busy in a long call keeps its run while another
worker, on another machine, still takes over within one TTL of this process stopping.
A stopped (SIGSTOP) or partitioned process renews nothing: that is the point.
"""

from __future__ import annotations

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
        self._beats: dict[str, _Beat] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def hold(self, store: Store, lease: Lease) -> None:
        """Renew ``lease`` until ``release``."""
        with self._wake:
            self._beats[lease.owner] = _Beat(store, lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="oncelog-heartbeat", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def release(self, lease: Lease) -> None:
        with self._wake:
            self._beats.pop(lease.owner, None)

    def release_store(self, store: Store) -> None:
        """Stop renewing the leases held through ``store`` (it is being closed)."""
        with self._wake:
            for owner in [o for o, b in self._beats.items() if b.store is store]:
                del self._beats[owner]

    def lost(self, lease: Lease) -> bool:
        """True once a renewal found the run taken over by another worker."""
        beat = self._beats.get(lease.owner)
        return beat is not None and beat.lost

    def _loop(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [b for b in self._beats.values() if b.due <= now and not b.lost]
                if not due:
                    nearest = min((b.due for b in self._beats.values()), default=now + 60)
                    self._wake.wait(max(nearest - now, 0.01))
                    continue
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
