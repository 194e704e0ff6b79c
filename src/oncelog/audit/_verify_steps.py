"""Does each step's row hold what its journal entries, replayed in order, leave behind?

The entries mirror the statements that wrote the row: an intent inserts it (or, for a
step run again, updates the arguments, attempts, start and reserved cost and clears the
outcome, the retry time and the reason), an outcome or a probe's answer settles it (an
outcome of a retry policy sets the next attempt's time), ``unknown`` (the row keeps its
first reason since the intent) and ``resolved`` are a person's business, as is ``retried``
(the attempts counted from zero again, no retry time). A step recorded
after it ran (a model call, a read) is one ``recorded`` entry, replayed as its intent
followed by its outcome (whose cost it names ``settled_cost``); a ledger written before
that holds the two entries, replayed as they are. Columns the runtime reads are all here;
``finished_at`` (shown, never read) is not. Records written before a column was
journalled leave it unchecked.

Every step needs its run's row (``orphan_steps``): replay, leases and budgets reach a
step through its run. Nothing but the schema's foreign key said so, and PostgreSQL's was
dropped (every writer of a step locks the run's row first, migration 18), so a run's row
deleted behind the ledger's back would leave its steps unreached and unreported. The
runs seen in the same pass over the tables (``RunsCheck.rows``) tell: no query more.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from ..records._no_result import NO_RESULT
from ..records._records import JournalEntry
from ..records._transitions import INTENT, MARK_UNKNOWN, RETRY, state_after
from ..stores import STEP_COLUMNS
from ..stores._protocol import Store
from ._verify_rows import Found, decoded, differences, table

_COLUMNS = (*STEP_COLUMNS.split(", "), "cost", "irreversible")
_JSON = ("args", "result", "error")
# What the first intent writes and no later one changes.
_FIRST = ("step_id", "type", "tool", "kind", "key")
_UNJOURNALLED = object()  # an outcome written before outcomes journalled their cost


class StepsCheck:
    def __init__(self, runs: Set[str]) -> None:
        self._runs = runs  # the runs with a row, filled in before the steps are compared
        self._steps: dict[tuple[str, int], dict[str, Any]] = {}  # by run and position
        self._first_sent: dict[tuple[str, int], float] = {}  # the first intent's time

    def feed(self, entry: JournalEntry) -> None:
        if entry.seq is None:
            return
        data, where = entry.data, (entry.run_id, entry.seq)
        step = self._steps.get(where)
        if entry.event == "intent":
            self._intent(where, step, data, entry.at)
        elif entry.event == "recorded":  # an intent and its outcome in one record
            self._intent(where, step, data, entry.at)
            self._outcome(self._steps[where], data, data["settled_cost"])
        elif step is None:
            return  # the step's intent is not in the journal: reported where it broke
        elif entry.event in ("outcome", "probed"):
            self._outcome(step, data, data.get("cost", _UNJOURNALLED))
        elif entry.event == MARK_UNKNOWN.event:
            if step.get("reason") is None:  # the first reason since the intent stays
                step["reason"] = data.get("reason")
            step["state"] = state_after(entry.event, data)
        elif entry.event in ("resolved", "corrected"):  # a correction replaces a decision
            result = NO_RESULT if data.get("no_result") else data.get("result")
            step.update(state=state_after(entry.event, data), result=result)
        elif entry.event == RETRY.event:  # a person's fresh set of attempts, same key
            step.update(state=state_after(entry.event, data), attempts=0, retry_at=None)
        elif entry.event == "retries_resumed":  # a person's resume: the next attempt at once
            step["retry_at"] = None

    def _intent(
        self, where: tuple[str, int], step: dict[str, Any] | None, data: dict[str, Any], at: float
    ) -> None:
        current = {
            "args_hash": str(data["args_hash"]), "args": data.get("args"),
            "attempts": int(data["attempt"]), "state": INTENT.target.value, "result": None,
            "error": None, "retry_at": None, "reason": None,
        }  # fmt: skip
        if step is None:
            step = {name: str(data[name]) for name in _FIRST if name in data}
            step.update(tokens_in=0, tokens_out=0)
            if "cost" in data:
                step.update(cost=0.0, irreversible=bool(data["irreversible"]))
                step["first_started_at"] = None  # set from the second attempt on
                self._first_sent[where] = at  # a dedupe window runs from here
            self._steps[where] = step
        elif "first_started_at" in step:
            step["first_started_at"] = self._first_sent[where]
        step.update(current)
        if "cost" not in data:  # written before intents journalled their cost and time
            step.pop("cost", None)
            step.pop("started_at", None)
            return
        step["started_at"] = at  # the intent's time is the row's start, to the bit
        if "cost" in step:
            step["cost"] += float(data["cost"])

    @staticmethod
    def _outcome(step: dict[str, Any], data: dict[str, Any], cost: Any) -> None:
        """An attempt settled: ``cost`` the outcome's own (None: the reserved one stays)."""
        step.update(state=data["state"], result=data["result"], error=data["error"])
        for name in ("tokens_in", "tokens_out"):
            if name in data:
                step[name] = int(data[name])
            else:
                step.pop(name, None)
        if cost is _UNJOURNALLED:
            step.pop("cost", None)  # settled before outcomes journalled it
        elif cost is not None:
            step["cost"] = float(cost)
        retry_at = data.get("retry_at")  # a retry policy's next attempt (schema 11)
        step["retry_at"] = None if retry_at is None else float(retry_at)

    def compare(self, store: Store, run_id: str | None, found: Found) -> None:
        orphans: dict[str, tuple[int, int, int]] = {}  # by run: how many, first, last
        for raw in table(store, "steps", run_id):
            row = dict(zip(_COLUMNS, raw, strict=True))
            if row["run_id"] not in self._runs:
                many, first, _ = orphans.get(row["run_id"], (0, row["seq"], 0))
                orphans[row["run_id"]] = (many + 1, first, row["seq"])
            no_result = row["state"] == "done" and row["result"] is None and row["error"] is None
            row.update({name: decoded(row[name]) for name in _JSON})
            if no_result:  # resolved without a result: a recorded null must not pass for it
                row["result"] = NO_RESULT
            where = (row["run_id"], row["seq"])
            named = f"step {row['seq']} ({row['step_id']}) of run {row['run_id']!r}"
            expected = self._steps.pop(where, None)
            if expected is None:
                found("state", where[0], f"{named} is in the steps table but not in the "
                      "journal: it was added behind the journal's back", None)  # fmt: skip
            elif wrong := differences(row, expected):
                found("state", where[0], f"{named} holds other {', '.join(wrong)} than its "
                      "journal says: the table was edited", None)  # fmt: skip
        for (run, seq), _ in sorted(self._steps.items()):
            found("state", run, f"step {seq} of run {run!r} is in the journal but not in the "
                  "steps table: it was deleted", None)  # fmt: skip
        for run, (many, first, last) in sorted(orphans.items()):
            steps = f"step {first}" if many == 1 else f"{many} steps ({first} to {last})"
            found("orphan_steps", run, f"run {run!r} has no row in the runs table but {steps} "
                  "in the steps table: its row was deleted, or the steps added, behind the "
                  "ledger's back", None)  # fmt: skip
