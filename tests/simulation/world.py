"""The simulated world a schedule runs in: one clock for the engine, the store and the
provider, the crash points turned into an exception, and a provider that counts what it
performed by key and by logical operation, which is all the oracle trusts.

Time enters oncelog in four places, each pointed at ``SimClock`` while a schedule runs:
the engine's ``Surroundings`` (``clock``, ``key_clock``, ``sleep``, ``random``), the
SQLite store's SQL clock (every ``julianday('now')`` of ``stores/_sqlite._CLOCK``: leases,
subject expiry, approval expiry), answered by a ``julianday`` function each connection is
given, the same clock read in the process by its hot path (``_sqlite_write.clock``: a
step's start and its records' times, known before their links are computed), and a
``MarkerProbe``'s ``sleep``. A crash point raises ``Crash``, a
``BaseException`` that no engine handler catches, so the process "dies" right there.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import oncelog
from oncelog import markers
from oncelog.failures import Failure
from oncelog.signals import _crashpoints as crashpoints
from oncelog.stores import _sqlite, _sqlite_write

EPOCH = 1_700_000_000.0  # where every schedule's clock starts
_JULIAN_UNIX = 2440587.5


class SimClock:
    """Seconds that move only when the schedule moves them (or a wait "sleeps")."""

    def __init__(self, now: float = EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def julianday(self, text: object) -> float | None:
        return self.now / 86400.0 + _JULIAN_UNIX if text == "now" else None


class Crash(BaseException):
    """The process dies at a crash point: nothing after it runs, nothing is released."""


@dataclass
class CrashPoints:
    """Which visit of which point kills the current process (None: none armed)."""

    armed: tuple[str, int] | None = None
    hits: int = 0

    def reach(self, point: str, step_id: str) -> None:
        if self.armed is not None and point == self.armed[0]:
            self.hits += 1
            if self.hits == self.armed[1]:
                self.armed = None
                raise Crash(point)


@contextmanager
def installed(clock: SimClock, points: CrashPoints) -> Iterator[None]:
    """The simulated clock in every SQLite connection opened meanwhile, and the crash
    points raising ``Crash``; both as they were afterwards."""
    connect, reach, armed = _sqlite._connect, crashpoints.reach, crashpoints.ARMED
    store_clock = _sqlite_write.clock

    def connect_simulated(path: str, busy_timeout: float, create: bool) -> sqlite3.Connection:
        db = connect(path, busy_timeout, create)
        db.create_function("julianday", 1, clock.julianday)
        return db

    def clock_simulated() -> float:  # what ``_sqlite._CLOCK`` computes from it
        return (clock.now / 86400.0 + _JULIAN_UNIX - _JULIAN_UNIX) * 86400.0

    _sqlite._connect = connect_simulated
    _sqlite_write.clock = clock_simulated
    crashpoints.reach, crashpoints.ARMED = points.reach, True
    try:
        yield
    finally:
        _sqlite._connect = connect
        _sqlite_write.clock = store_clock
        crashpoints.reach, crashpoints.ARMED = reach, armed


def simulate_time(ledger: oncelog.Ledger, clock: SimClock, rng: random.Random) -> None:
    """The ledger's runs read ``clock`` and wait by moving it (a retry's backoff)."""
    ledger.surroundings = replace(
        ledger.surroundings, clock=clock, key_clock=clock, sleep=clock.advance, random=rng.random
    )


class ResetBefore(ConnectionError):
    """The connection dropped before the provider read the request: nothing performed."""


class ResetAfter(ConnectionError):
    """The connection dropped after the provider acted: the answer is lost."""


class Late(TimeoutError):
    """The provider acted after the client gave up waiting."""


class Declined(Exception):
    """The provider's definite "no": nothing performed."""


def classify(exc: BaseException) -> Failure | None:
    """A truthful ``failures=`` classifier for this provider's errors."""
    if isinstance(exc, ResetBefore):
        return Failure.NOT_PERFORMED
    if isinstance(exc, Declined):
        return Failure.REFUSED
    return None


@dataclass(frozen=True)
class Item:
    """One effect the provider performed: what it keeps, and can be searched for."""

    key: str
    op: tuple[Any, ...]
    subject: str  # the item as it was sent, as JSON: 42 and 42.0 written apart
    body: str
    answer: dict[str, Any]
    at: float


@dataclass
class SimProvider:
    """Performs effects and keeps them. ``dedupe``: seconds it answers a repeated key
    with the first answer (0: it keeps no keys). ``lag``: seconds before an item shows
    in a search. ``faults``: what its calls do, in order, until they run out."""

    clock: SimClock
    dedupe: float
    lag: float
    faults: list[str]
    items: list[Item] = field(default_factory=list)
    calls: int = 0

    def call(self, key: str, op: tuple[Any, ...], body: str) -> dict[str, Any]:
        self.calls += 1
        fault = self.faults.pop(0) if self.faults else "ok"
        if fault == "reset_before":
            raise ResetBefore("connection reset before the request was read")
        item = self._kept(key)
        if item is None:
            if fault == "refuse":  # a repeated key it keeps gets its first answer instead
                raise Declined(f"declined {key}")
            answer = {"id": f"fx_{len(self.items) + 1}"}
            sent = oncelog.canonical_json(list(op[0]))
            item = Item(key, op, sent, markers.stamp(body, key), answer, self.clock())
            self.items.append(item)
        if fault == "reset_after":
            raise ResetAfter("connection reset before the answer arrived")
        if fault == "late":
            raise Late("no answer in time")
        return item.answer

    def _kept(self, key: str) -> Item | None:
        for item in reversed(self.items):
            if item.key == key and self.clock() - item.at < self.dedupe:
                return item
        return None

    def performed(self, op: tuple[Any, ...]) -> list[Item]:
        return [item for item in self.items if item.op == op]

    def search(self, marker: str) -> list[Item]:
        """The provider's search: by marker, over what its index shows by now."""
        shown = [item for item in self.items if self.clock() - item.at >= self.lag]
        return [item for item in shown if marker in item.body]

    def by_key(self, key: str, *args: Any, **kwargs: Any) -> oncelog.ProbeAnswer:
        """A truthful probe: the provider's own lookup by key (no lag)."""
        found = [item for item in self.items if item.key == key]
        return oncelog.Found(found[-1].answer) if found else oncelog.NOT_FOUND

    def probe(self, how: str, consistent: bool) -> Callable[..., oncelog.ProbeAnswer] | None:
        if how == "truthful":
            return self.by_key
        if how == "cannot_tell":
            return lambda key, *args, **kwargs: oncelog.CANNOT_TELL
        if how == "raising":
            return _raising
        if how == "marker":
            return markers.MarkerProbe(
                search=self.search,
                marker_of=lambda item: markers.stamped(item.body),
                result_of=lambda item: item.answer,
                consistent_after=timedelta(seconds=self.lag + 1) if consistent else None,
                sleep=self.clock.advance,
            )
        return None


def _raising(key: str, *args: Any, **kwargs: Any) -> oncelog.ProbeAnswer:
    raise ConnectionError("the provider's lookup is down")
