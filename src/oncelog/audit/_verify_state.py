"""Does what the ledger holds agree with its journal?

Replay, the controls and the budgets read the state tables (runs, steps, halts, approvals,
agent budgets, subjects, holds), not the journal; the chain proves the journal intact, so an
edit that bypassed the journal shows as a difference between the two. Each table has its check, fed
every journal entry in order and then compared with every row of its table; which columns
each covers, and why the others are not, is in ``docs/evidence.md``. A new statement that
writes a covered column must journal what it wrote, and the table's check must replay it
(``tests/test_state_machine.py`` runs ``verify`` after every rule to catch a gap).

Every change to the tables is journalled in its own transaction, so tables read after the
journal hold the same changes unless a writer committed in between, which then shows as a
journal longer than the one read: the comparison is made again from a fresh read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import suppress

from ..records._records import JournalEntry
from ..stores._protocol import Store
from ._verify_controls import ControlsCheck
from ._verify_holds import HoldsCheck
from ._verify_retention import RetentionCheck, TombstonesCheck
from ._verify_runs import RunsCheck
from ._verify_steps import StepsCheck
from ._verify_subjects import SubjectsCheck

ATTEMPTS = 3  # comparisons before differences seen while the ledger is written are reported
Difference = tuple[str, str, str]  # kind (state, orphan_steps), run_id, message


class StateCheck:
    """Fed every journal entry in order, then compared with the tables."""

    def __init__(self) -> None:
        runs = RunsCheck()
        # In this order: the steps' check asks which runs the runs' check found a row of.
        self._checks = (
            runs, StepsCheck(runs.rows), ControlsCheck(), SubjectsCheck(), HoldsCheck(),
            RetentionCheck(), TombstonesCheck(),  # the retention policy's, the tombstones
        )  # fmt: skip
        self.last_id = 0  # the last journal entry fed

    def feed(self, entry: JournalEntry) -> None:
        self.last_id = entry.id
        for check in self._checks:
            # A malformed record is skipped: its broken link is reported by the chain check.
            with suppress(KeyError, TypeError, ValueError):
                check.feed(entry)

    def differences(self, store: Store, run_id: str | None) -> list[Difference]:
        """Every row of the tables, or only ``run_id``'s (no agent budgets then)."""
        found: list[Difference] = []
        for check in self._checks:
            check.compare(
                store, run_id, lambda kind, run, message, _: found.append((kind, run, message))
            )
        return found


def state_differences(
    store: Store,
    run_id: str | None,
    state: StateCheck,
    journal: Callable[[], Iterable[JournalEntry]],
) -> list[Difference]:
    """The differences between the tables and the journal ``state`` was fed, compared
    again (``journal`` read anew) while the journal grows under the comparison."""
    for _ in range(ATTEMPTS):
        found = state.differences(store, run_id)
        if not found or not store.journal(run_id, state.last_id, 1):
            return found
        state = StateCheck()
        for entry in journal():
            state.feed(entry)
    return [
        (kind, run, f"{message} (the ledger was written to while it was verified: verify "
                    "again when it is quiet; a difference that stays is no write in progress)")
        for kind, run, message in found
    ]  # fmt: skip
