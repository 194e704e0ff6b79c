"""Public helpers for testing agents that use oncelog."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import _leases as leases
from ._ledger import Ledger, open
from ._run import AsyncRun, Run, _current, current_run


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
    leases.forget(run._engine.lease.owner)
    if current_run() is run:
        _current.set(None)
