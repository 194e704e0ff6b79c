"""Does what the ledger holds agree with its journal?

Replay, the controls and the budgets read the state tables (runs, steps, halts, approvals,
agent budgets), not the journal; the chain proves the journal intact, so an edit that
bypassed the journal shows as a difference between the two. Each table has its check, fed
every journal entry in order and then compared with every row of its table; which columns
each covers, and why the others are not, is in ``docs/evidence.md``.
"""

from __future__ import annotations

from contextlib import suppress

from ._records import JournalEntry
from ._verify_controls import ControlsCheck
from ._verify_rows import Found
from ._verify_runs import RunsCheck
from ._verify_steps import StepsCheck
from .stores._protocol import Store


class StateCheck:
    """Fed every journal entry in order, then compared with the tables."""

    def __init__(self, found: Found) -> None:
        self._found = found
        self._checks = (RunsCheck(), StepsCheck(), ControlsCheck())

    def feed(self, entry: JournalEntry) -> None:
        for check in self._checks:
            # A malformed record is skipped: its broken link is reported by the chain check.
            with suppress(KeyError, TypeError, ValueError):
                check.feed(entry)

    def compare(self, store: Store, run_id: str | None) -> None:
        """Every row of the tables, or only ``run_id``'s (no agent budgets then)."""
        for check in self._checks:
            check.compare(store, run_id, self._found)
