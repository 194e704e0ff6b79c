"""Waking a process that waits for a person's decision: one connection of its own that
LISTENs on ``DECISIONS_CHANNEL``, which every decision's transaction NOTIFYs at its commit.

A notification only says "look now": the waiter reads the ledger again, so one that is
lost (a broken connection, another schema of the same database deciding) costs nothing
but latency. If the connection cannot be made the feed polls instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from ..signals import _drain as drain
from ._postgres_deadline import WATCHDOG
from ._postgres_pool import DECISIONS_CHANNEL, connect
from ._protocol import DecisionFeed, PollingFeed

log = logging.getLogger("oncelog")

SLICE = 0.25  # seconds; how soon a wait notices that its process started draining


class ListeningFeed:
    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn

    def wait(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not drain.draining():
            left = end - time.monotonic()
            if left <= 0:
                return
            try:
                for _ in self._conn.notifies(timeout=min(left, SLICE), stop_after=1):
                    return
            except psycopg.Error as exc:  # the waiter polls on; the next look reads anyway
                log.warning("listening for decisions failed (%s); polling instead", exc)
                drain.wait_for_drain(left)
                return


@contextmanager
def decisions(url: str, timeout: float) -> Iterator[DecisionFeed]:
    """Connecting and LISTEN are bounded by the store timeout like any store call; the
    waits for a notification are bounded by their own timeouts, and a frozen server only
    makes them return empty (the waiter then reads the ledger, as bounded)."""
    conn = None
    try:
        conn = connect(url, timeout)
        with WATCHDOG.guard(conn, time.monotonic() + timeout):
            conn.execute(f"LISTEN {DECISIONS_CHANNEL}")
    except Exception as exc:  # StoreUnavailable or psycopg's: polling still works
        if conn is not None:
            conn.close()
        log.warning("cannot LISTEN for decisions (%s); polling instead", exc)
        yield PollingFeed()
        return
    try:
        yield ListeningFeed(conn)
    finally:
        conn.close()
