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
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from .._exceptions import Draining, OnceLogError
from ..signals import _drain as drain
from ..stores import Store, open_store

if TYPE_CHECKING:
    from ._notices import Notices


class Waitable(Protocol):
    """What the waiter uses of a ``Ledger`` (which imports this module)."""

    @property
    def url(self) -> str | None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def approval_poll(self) -> float: ...
    @property
    def notices(self) -> Notices: ...
    def wait_for_decision(self, run_id: str, *, timeout: float | timedelta) -> bool: ...


# The ledgers of the runs that stopped for a person in this process, by run id, so that
# ``run_main`` can wait on the run its agent stopped at. Bounded: workers never wait.
_stopped: dict[str, Waitable] = {}
_REMEMBERED = 32
# Seconds between attempts to deliver again, while waiting, a notice whose delivery failed.
REDELIVER_EVERY = 30.0


def note_stop(ledger: Waitable, run_id: str) -> None:
    """The run ``run_id`` of ``ledger`` stopped for a person in this process."""
    _stopped.pop(run_id, None)
    _stopped[run_id] = ledger
    while len(_stopped) > _REMEMBERED:
        del _stopped[next(iter(_stopped))]


def wait_after_stop(stop: OnceLogError, timeout: float, waiter: str) -> bool:
    """Wait up to ``timeout`` seconds for a decision on the run ``stop`` stopped; False if
    none came, or if this process never saw that run stop (nothing to watch). ``waiter``
    is this process's identity as a lease owner, journalled with the wait."""
    ledger = _stopped.pop(stop.run_id or "", None)
    if ledger is None or stop.run_id is None:
        return False
    if not ledger.closed:
        return ledger.wait_for_decision(stop.run_id, timeout=timeout)
    if ledger.url is None:
        return False  # a closed ledger made from a store object: nothing to open again
    store = open_store(ledger.url)
    try:
        notices = ledger.notices.moved_to(store)
        return wait_for_decision(
            store, stop.run_id, timeout, ledger.approval_poll, notices.redeliver, waiter
        )
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
