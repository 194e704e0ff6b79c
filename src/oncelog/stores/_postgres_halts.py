"""The kill switches that are on, kept in memory so that a model call or a read looks at
them without a round trip (an effect still looks inside its intent's transaction).

One connection per store, of its own, LISTENs on the halts table's channel, which every
transaction that sets, clears or removes a switch NOTIFYs at its commit (migration 28),
and reads the switches that are on again whenever it hears. The memory answers one
question only, "no switch covers this run", and only while it can show it is not behind;
otherwise, and whenever a switch does cover the run, the store asks the server as before:

- LISTEN first, then the read: a switch set after the LISTEN is either in the read or
  heard afterwards. A notification that arrives during the read makes it read again.
- Nothing unread on the connection's socket: the caller looks at the socket itself, so a
  notification that arrived is heeded even before the thread has taken it in, and a
  connection the server closed (its farewell waits there) is never trusted.
- A read sent within ``TRUST`` seconds: the thread reads again every ``PING`` seconds, and
  a read sent after a switch's commit holds it. Whatever happens to the connection (a
  partition no socket reports), a look that starts ``TRUST`` after a commit finds it.
- No switch set since through any store of this process (``forget_everywhere``): a
  process sees its own switches at once, not a notification later.

A lost connection is made again after ``RETRY`` seconds; until then every look asks the
server. A ledger whose halts table has no announcing trigger is never kept in memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
import weakref
from typing import Any, NamedTuple

import psycopg

from ._postgres_deadline import WATCHDOG
from ._postgres_pool import connect

log = logging.getLogger("oncelog")

PING = 1.0  # seconds between two reads while nothing is heard
TRUST = 2.0  # seconds a read is relied on: a look at least this long after a commit sees it
RETRY = 1.0  # seconds before a lost or refused connection is tried again
APPLICATION_NAME = "oncelog-halts"  # an operator finds the listeners in pg_stat_activity
TRIGGER = "halts_changed"

# Where the halts table announces its changes (its oid names the channel), and whether it
# does. Read before the LISTEN; the switches are read after it.
_CHANNEL = (
    "SELECT 'halts'::regclass::oid, EXISTS (SELECT 1 FROM pg_trigger "
    f"WHERE tgrelid = 'halts'::regclass AND tgname = '{TRIGGER}' AND tgenabled <> 'D')"
)
_ON = "SELECT scope, target FROM halts WHERE cleared_at IS NULL"

Connection = psycopg.Connection[tuple[Any, ...]]
Switch = tuple[str, str]  # (scope, target), as in the halts table


class _View(NamedTuple):
    """The switches that were on when a read was sent, and the socket to look at."""

    on: frozenset[Switch]
    read_at: float  # time.monotonic() when the read was sent
    fileno: int


class HaltWatch:
    """The switches that are on, for one store; its thread starts at the first look."""

    def __init__(self, url: str, timeout: float) -> None:
        self._url = url
        self._timeout = timeout
        self._start_over()
        _WATCHES.add(self)

    def _start_over(self) -> None:
        self._lock = threading.Lock()
        self._view: _View | None = None
        self._epoch = 0  # moved by forget(): a read begun before it is not installed
        self._thread: threading.Thread | None = None
        self._closed = False
        # forget() and close() wake the thread's waits: to read again, or to end.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def covers_none(self, run_id: str, agent: str | None) -> bool:
        """True only if no switch covers the run (global, its agent's, its own) by a read
        the memory may be trusted on; False means "ask the server"."""
        view = self._view
        if view is None:
            if self._thread is None:
                self._start()
            return False
        if time.monotonic() - view.read_at > TRUST or _unread(view.fileno):
            return False
        if self._view is not view:  # the thread took something in since the first look
            return False
        on = view.on
        return (
            ("global", "") not in on
            and ("agent", "" if agent is None else agent) not in on
            and ("run", run_id) not in on
        )

    def switches_on(self) -> frozenset[Switch] | None:
        """The switches of the read in force, if it is trusted (for tests and operators)."""
        view = self._view
        if view is None or time.monotonic() - view.read_at > TRUST or _unread(view.fileno):
            return None
        return view.on

    def forget(self) -> None:
        """Trust nothing read so far (a switch was set in this process), and read again."""
        with self._lock:
            self._epoch += 1
            self._view = None
            if not self._closed:
                self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # woken already: the pipe is full
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._view = None
            thread = self._thread
        _WATCHES.discard(self)
        self._wake()
        if thread is not None:
            thread.join(self._timeout + RETRY)
            if thread.is_alive():  # still connecting: it ends by itself, its pipe kept
                return
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run, name="oncelog-halts", daemon=True)
            self._thread.start()

    def _install(self, view: _View, epoch: int) -> bool:
        with self._lock:
            if self._epoch != epoch or self._closed:
                return False
            self._view = view
            return True

    def _run(self) -> None:
        healthy = True
        while not self._closed:
            try:
                conn = self._listen()
            except Exception as exc:  # StoreUnavailable or psycopg's: the server is asked
                if healthy:
                    log.warning("cannot LISTEN for kill switches (%s); asking the server", exc)
                healthy = False
                self._sleep(RETRY)
                continue
            if conn is None:
                return  # no trigger announces the switches: never kept in memory
            healthy = True
            try:
                self._follow(conn)
            except (psycopg.Error, OSError) as exc:
                if not self._closed:
                    log.warning("listening for kill switches failed (%s); asking the server", exc)
            finally:
                self._view = None  # before the socket is closed and its number reused
                conn.close()
            self._sleep(RETRY)

    def _listen(self) -> Connection | None:
        conn = connect(self._url, self._timeout, APPLICATION_NAME)
        try:
            with WATCHDOG.guard(conn, time.monotonic() + self._timeout):
                row = conn.execute(_CHANNEL).fetchone()
                assert row is not None, "the halts table has one oid"
                if not row[1]:
                    log.warning(
                        "the ledger's halts table announces no change (trigger %s): every "
                        "look at the kill switch asks the server",
                        TRIGGER,
                    )
                    conn.close()
                    return None
                conn.execute(f"LISTEN oncelog_halts_{int(row[0])}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _follow(self, conn: Connection) -> None:
        """Read, trust, wait until something arrives or the read is due again; forever."""
        while not self._closed:
            epoch = self._epoch
            self._view = None  # before anything may take a notification in
            on, read_at = self._read(conn)
            if self._install(_View(on, read_at, conn.fileno()), epoch):
                self._wait(read_at + PING - time.monotonic(), conn.fileno())

    def _read(self, conn: Connection) -> tuple[frozenset[Switch], float]:
        """The switches that are on, read after every notification that arrived so far;
        read again if another arrives meanwhile (it may be of a later commit)."""
        while True:
            _heard(conn)  # every one so far is older than the read below
            read_at = time.monotonic()
            with WATCHDOG.guard(conn, read_at + self._timeout):
                on = read_switches(conn)
            if not _heard(conn):
                return on, read_at

    def _sleep(self, seconds: float) -> None:
        if not self._closed:
            self._wait(seconds)

    def _wait(self, seconds: float, *more: int) -> None:
        """Until ``seconds`` pass, something arrives on ``more`` or the thread is woken."""
        waiting = select.poll()
        for fd in (self._wake_r, *more):
            waiting.register(fd, select.POLLIN)
        waiting.poll(max(0.0, seconds) * 1000)
        with contextlib.suppress(BlockingIOError):  # not woken
            os.read(self._wake_r, 4096)


def read_switches(conn: Connection) -> frozenset[Switch]:
    """The switches that are on (a module function: a test reaches the instant after it)."""
    return frozenset((scope, target) for scope, target in conn.execute(_ON))


def _heard(conn: Connection) -> bool:
    """Take in every notification that arrived; whether there was any."""
    return bool(list(conn.notifies(timeout=0)))


def _unread(fileno: int) -> bool:
    """Whether something waits to be read on the socket (a notification, the server's
    farewell), or the socket is gone. A poller of its own: one is not for two threads."""
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    return bool(poller.poll(0))


_WATCHES: weakref.WeakSet[HaltWatch] = weakref.WeakSet()


def forget_everywhere() -> None:
    """A switch was set in this process: no store of it trusts what it read before."""
    for watch in list(_WATCHES):
        watch.forget()


def _after_fork() -> None:
    # The child has no thread of its parent's and must not read its connection: each
    # watch starts over at its next look, with a lock and a pipe of its own.
    for watch in list(_WATCHES):
        os.close(watch._wake_r)
        os.close(watch._wake_w)
        watch._start_over()


os.register_at_fork(after_in_child=_after_fork)
