"""Public helpers for testing agents that use oncelog: a temporary ledger, a crash
simulated in-process, a fake provider with a clock the test moves, and the crash points
a test arms in the process it starts (``CRASH_ENV``: ``after_call``, ``after_call:3`` the
third time, ``after_call@send`` for step ``send``; docs/concepts.md says more)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ._fake_provider import FakeClock, FakeProvider, Performed, Refused
from ._ledger import Ledger, open
from .runtime._run import AsyncRun, Run
from .runtime._run import abandon as forget_as_crashed
from .signals._crashpoints import ENV_VAR as CRASH_ENV
from .signals._crashpoints import POINTS as CRASH_POINTS

__all__ = [
    "CRASH_ENV",
    "CRASH_POINTS",
    "FakeClock",
    "FakeProvider",
    "Performed",
    "Refused",
    "abandon",
    "temporary_ledger",
    "use_clock",
]


@contextmanager
def temporary_ledger(**options: Any) -> Iterator[Ledger]:
    """A ledger in a fresh temporary directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="oncelog-") as folder:
        ledger = open(str(Path(folder) / "ledger.db"), **options)
        try:
            yield ledger
        finally:
            ledger.close()


def abandon(run: Run | AsyncRun) -> None:
    """Forget ``run`` as a crash would: no outcome, no release. The next ``ledger.run``
    of the same id in this process takes it over at once, as a restarted process would."""
    forget_as_crashed(run)


def use_clock(ledger: Ledger, clock: Callable[[], float]) -> None:
    """Have the runs this ledger starts from now on judge time by ``clock`` (a
    ``FakeClock``): the age of an idempotency key (instead of the store's clock; a
    reading before the key's first send counts as no time passed), the wait before a
    retry."""
    ledger.surroundings = replace(ledger.surroundings, clock=clock, key_clock=clock)
