"""Waiting for a person's decision instead of exiting.

A run that stops for a person (halted, exit 3; waiting, exit 4) is closed as always: its
status says so and its lease is released, so nothing is held while nobody decides, and a
worker or another process may take the run meanwhile (with the next fencing token, as
any takeover). The waiter then watches the ledger: on PostgreSQL it LISTENs for the
NOTIFY each decision's transaction sends, and it looks again every ``approval_poll``
seconds anyway. Once a decision could let the run go on, the caller runs the agent's code
again: it replays what is recorded and continues, exactly as a restarted process would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._exceptions import Draining
from ..signals import _drain as drain
from ..stores import Store, open_store

if TYPE_CHECKING:
    from ._notices import Notices

# Seconds between attempts to deliver again, while waiting, a notice whose delivery failed.
REDELIVER_EVERY = 30.0


class Waiter:
    """How a ledger waits for a person's decision on one of its runs: owned by the
    ``Ledger``, which waits with it (``wait_for_decision``), and handed by a run that
    stops for a person to whoever catches its stop (``RunStopped.wait_for_decision``,
    which ``run_main`` calls), even once the ledger is closed."""

    def __init__(self, store: Store, url: str | None, poll: float, notices: Notices) -> None:
        self._store = store
        self._url = url  # what the store was opened from, to open it again once closed
        self._poll = poll
        self._notices = notices
        self.closed = False  # the ledger's store is closed

    def wait(self, run_id: str, timeout: float, waiter: str) -> bool:
        """``wait_for_decision`` on the ledger's store; ``waiter`` is this process's
        identity as a lease owner, journalled with the wait."""
        return wait_for_decision(
            self._store, run_id, timeout, self._poll, self._notices.redeliver, waiter
        )

    def after_stop(self, run_id: str, timeout: float, waiter: str) -> bool:
        """``wait`` for the run ``run_id``, which stopped for a person in this process; on
        the store opened again from its URL if the ledger was closed since (False if it
        was made from a store object: nothing to open again)."""
        if not self.closed:
            return self.wait(run_id, timeout, waiter)
        if self._url is None:
            return False
        store = open_store(self._url)
        try:
            notices = self._notices.moved_to(store)
            return wait_for_decision(store, run_id, timeout, self._poll, notices.redeliver, waiter)
        finally:
            store.close()


def wait_for_decision(
    store: Store,
    run_id: str,
    timeout: float,
    poll: float,
    redeliver: Callable[[], None],
    waiter: str,
) -> bool:
    """True as soon as the run is no longer stopped for a person, or a decision that may
    let it go on is journalled; False after ``timeout`` seconds without one. Raises
    ``Draining`` when the process starts draining (SIGTERM) meanwhile. ``redeliver`` is
    called every ``REDELIVER_EVERY`` seconds: notices that could not be delivered. The
    wait is journalled first with ``waiter`` (a lease owner identity of this process), so
    whoever decides learns that nothing needs restarting."""
    deadline = time.monotonic() + timeout
    next_delivery = time.monotonic() + REDELIVER_EVERY
    store.record_waiting(run_id, json.dumps({"owner": waiter, "until": time.time() + timeout}))
    return _watch(store, run_id, deadline, next_delivery, poll, redeliver)


def _watch(
    store: Store,
    run_id: str,
    deadline: float,
    next_delivery: float,
    poll: float,
    redeliver: Callable[[], None],
) -> bool:
    with store.decisions() as feed:  # listening before looking: nothing falls between
        while True:
            if time.monotonic() >= next_delivery:
                redeliver()
                next_delivery = time.monotonic() + REDELIVER_EVERY
            if drain.draining():
                raise Draining(
                    "this process is shutting down while its run waits for a person; "
                    "the run stays stopped in the ledger until a person decides",
                    run_id=run_id,
                )
            if not store.awaiting_person(run_id):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            feed.wait(min(left, poll))
