"""Does what the ledger holds agree with its journal?

Replay and the controls read the state tables (steps, halts, approvals), not the journal;
the chain proves the journal intact, so an edit that bypassed the journal shows as a
difference between the two. Each step's row must be what its journal entries, replayed in
order, leave behind; each kill switch that is on must be on in the journal; each
approval a person decided must have that person's decision in the journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from ._records import ApprovalStatus, HaltScope, JournalEntry, StepRecord
from ._serialization import decode
from .stores._protocol import Store

PAGE = 1000
_RESOLVED = {"done": "done", "not_done": "not_done", "abandon": "abandoned"}


@dataclass
class _Expected:
    """What a step's row must hold after its journal entries so far."""

    step_id: str
    tool: str
    key: str
    args_hash: str
    args: Any
    state: str
    attempts: int
    result: Any = None
    error: Any = None
    outcome_known: bool = False  # result and error are set by an outcome or a probe


class StateCheck:
    """Fed every journal entry in order, then compared with the tables."""

    def __init__(self, report: Callable[[str, str, str, int | None], None]) -> None:
        self._report = report  # (kind, run_id, message, record_id)
        self._steps: dict[str, dict[int, _Expected]] = {}  # by run, by position
        self._halts: dict[tuple[str, str], bool] = {}
        self._decisions: set[tuple[str, str, str, str]] = set()  # run, step, status, by

    def feed(self, entry: JournalEntry) -> None:
        # A malformed record is skipped: its broken link is reported by the chain check.
        with suppress(KeyError, TypeError, ValueError):
            self._feed(entry)

    def _feed(self, entry: JournalEntry) -> None:
        data, event = entry.data, entry.event
        if event.startswith("halt_"):
            switch = (str(data.get("scope")), str(data.get("target")))
            self._halts[switch] = event == "halt_set"
        elif event in ("approval_approved", "approval_denied"):
            decided = (entry.run_id, str(data.get("step_id")), event[9:], str(data.get("by")))
            self._decisions.add(decided)
        elif entry.seq is not None:
            self._step_event(entry)

    def _step_event(self, entry: JournalEntry) -> None:
        data, steps, seq = entry.data, self._steps.setdefault(entry.run_id, {}), entry.seq or 0
        if entry.event == "intent":
            steps[seq] = _Expected(
                str(data["step_id"]), str(data["tool"]), str(data["key"]),
                str(data["args_hash"]), data.get("args"), "in_flight", int(data["attempt"]),
            )  # fmt: skip
            return
        step = steps.get(seq)
        if step is None:
            return  # records of the step before the chain began
        if entry.event in ("outcome", "probed"):
            step.state, step.result, step.error = data["state"], data["result"], data["error"]
            step.outcome_known = True
        elif entry.event == "unknown":
            step.state = "unknown"
        elif entry.event == "resolved":
            step.state, step.result = _RESOLVED[str(data["resolution"])], data.get("result")

    def compare(self, store: Store, runs: Iterable[str]) -> None:
        for run_id in runs:
            self._compare_run(run_id, list(_steps(store, run_id)))
        self._compare_halts(store)
        self._compare_approvals(store)

    def _compare_run(self, run_id: str, rows: list[StepRecord]) -> None:
        expected_steps = self._steps.get(run_id, {})
        journalled = set(expected_steps)
        for row in rows:
            expected = expected_steps.get(row.seq)
            if expected is None:
                self._report(
                    "state", run_id, f"step {row.seq} ({row.step_id}) is in the steps table "
                    "but not in the journal: it was added behind the journal's back", None,
                )  # fmt: skip
                continue
            journalled.discard(row.seq)
            wrong = _differences(row, expected)
            if wrong:
                self._report(
                    "state", run_id, f"step {row.seq} ({row.step_id}) holds other "
                    f"{', '.join(wrong)} than its journal says: the table was edited", None,
                )  # fmt: skip
        for seq in sorted(journalled):
            self._report(
                "state", run_id,
                f"step {seq} is in the journal but not in the steps table: it was deleted",
                None,
            )  # fmt: skip

    def _compare_halts(self, store: Store) -> None:
        on = {(h.scope.value, h.target) for h in store.halts(active_only=True, limit=100_000)}
        journal_on = {switch for switch, active in self._halts.items() if active}
        for scope, target in sorted(journal_on - on):
            self._report("state", "" if scope != HaltScope.RUN.value else target,
                         f"the {scope} kill switch {target!r} is on in the journal but "
                         "off in the halts table: it was cleared behind the journal's back",
                         None)  # fmt: skip
        for scope, target in sorted(on - journal_on):
            self._report("state", "" if scope != HaltScope.RUN.value else target,
                         f"the {scope} kill switch {target!r} is on in the halts table but "
                         "not in the journal", None)  # fmt: skip

    def _compare_approvals(self, store: Store) -> None:
        for approval in store.approvals(None, 100_000):
            if approval.decided_by is None:
                continue
            status = "denied" if approval.status is ApprovalStatus.DENIED else "approved"
            if (approval.run_id, approval.step_id, status, approval.decided_by) not in (
                self._decisions
            ):
                self._report(
                    "state", approval.run_id,
                    f"approval {approval.id} of step {approval.step_id!r} says "
                    f"{approval.decided_by} {status} it; the journal has no such decision",
                    None,
                )  # fmt: skip


def _differences(row: StepRecord, expected: _Expected) -> list[str]:
    wrong = [
        name
        for name, held, said in (
            ("step id", row.step_id, expected.step_id),
            ("tool", row.tool, expected.tool),
            ("key", row.key, expected.key),
            ("argument hash", row.args_hash, expected.args_hash),
            ("state", row.state.value, expected.state),
            ("attempts", row.attempts, expected.attempts),
        )
        if held != said
    ]
    if _decoded(row.args_json) != expected.args:
        wrong.append("arguments")
    settled = expected.outcome_known or expected.state in _RESOLVED.values()
    if settled and _decoded(row.result_json) != expected.result:
        wrong.append("result")
    if expected.outcome_known and _decoded(row.error_json) != expected.error:
        wrong.append("error")
    return wrong


def _decoded(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return decode(text)
    except ValueError:
        return ("undecodable", text)


def _steps(store: Store, run_id: str) -> Iterator[StepRecord]:
    after = 0
    while page := store.steps(run_id, after, PAGE):
        yield from page
        after = page[-1].seq + 1
