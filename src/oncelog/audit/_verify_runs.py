"""Does each run's row hold what its journal entries leave behind?

A run is created by ``run_created`` (or ``run_submitted``, for a worker); every later
change to the columns the runtime reads is journalled with the run: the lease taken (its
owner and fencing token), the plan replaced, a budget set, the run finished, halted on an
effect in doubt or another stop (its sticky stop, set and lifted), released by a person's
decision. ``lease_expires_at`` is moved by every renewal, which is not journalled, so it is
held to bounds: none on a run no one holds, and no later than the store's time plus the
ttl its holder took the lease for (journalled with the lease). ``updated_at`` (the order of
the queue) is not checked. Records written before a column was journalled leave it
unchecked.
"""

from __future__ import annotations

from typing import Any

from ..records._records import JournalEntry, RunStatus
from ..stores._protocol import Store
from ._verify_rows import Found, decoded, differences, table

_COLUMNS = (
    "run_id", "status", "plan", "reason", "created_at", "owner", "fencing_token", "agent",
    "budget", "input", "stopped_by", "stop_seq", "stop", "lease_left",
)  # fmt: skip
# Seconds a lease may seem to run past its ttl: the store's clock read in other statements.
CLOCK_SLACK = 1.0
_JSON = ("plan", "budget", "input", "stop")
_ENDED = {"run_" + status.value for status in RunStatus}


class RunsCheck:
    def __init__(self) -> None:
        self._runs: dict[str, dict[str, Any]] = {}
        self._ttls: dict[str, float] = {}  # the holder's lease length, where journalled
        self.rows: set[str] = set()  # the runs with a row, once compared: steps need one

    def feed(self, entry: JournalEntry) -> None:
        data, event = entry.data, entry.event
        if event in ("run_created", "run_submitted"):
            self._runs[entry.run_id] = _created(entry)
            return
        run = self._runs.get(entry.run_id)
        if run is None:
            return  # a switch or a budget of no run here, or a creation not journalled
        if event == "lease_acquired":
            run.update(owner=data["owner"], fencing_token=int(data["token"]))
            if "ttl" in data:
                self._ttls[entry.run_id] = float(data["ttl"])
            else:
                self._ttls.pop(entry.run_id, None)
            run["status"] = "halted" if run["status"] == "halted" else "running"
        elif event == "plan_replaced":
            run["plan"] = data["new"]
        elif event == "budget_set":
            run["budget"] = data["budget"]
        elif event == "unknown":
            run.update(status="halted", reason=data["reason"])
            if "stop" in data:  # the run's sticky stop, journalled since schema 24
                run.update(stop_seq=entry.seq, stop=data["stop"])
        elif event == "run_stopped":
            run.update(status="halted", reason=data["reason"], stop_seq=entry.seq,
                       stop=data["stop"])  # fmt: skip
        elif event == "stop_lifted":
            run.update(stop_seq=None, stop=None)
        elif event in ("resolved", "corrected", "retried"):  # a decision fences off the holder
            run.update(owner=None, fencing_token=run["fencing_token"] + 1)
        elif event == "run_queued" and "by" in data:  # released by a person's decision
            run.update(status="queued", reason=None, stopped_by=None)
        elif event in _ENDED:
            run.update(status=event[4:], reason=data["reason"], owner=None)
            if "stopped_by" in data:
                run["stopped_by"] = data["stopped_by"]
            else:
                run.pop("stopped_by", None)  # journalled only since schema 9

    def compare(self, store: Store, run_id: str | None, found: Found) -> None:
        for raw in table(store, "runs", run_id):
            row = dict(zip(_COLUMNS, raw, strict=True))
            row.update({name: decoded(row[name]) for name in _JSON})
            named = row["run_id"]
            self.rows.add(named)
            expected = self._runs.pop(named, None)
            if expected is None:
                found("state", named, f"run {named!r} is in the runs table but the journal "
                      "never created it: it was added behind the journal's back", None)  # fmt: skip
            elif wrong := differences(row, expected):
                found("state", named, f"run {named!r} holds other {', '.join(wrong)} than its "
                      "journal says: the table was edited", None)  # fmt: skip
            elif wrong_lease := self._wrong_lease(row):
                found("state", named, f"run {named!r} {wrong_lease}: lease_expires_at was "
                      "edited", None)  # fmt: skip
        for named in sorted(self._runs):
            found("state", named, f"run {named!r} is in the journal but not in the runs "
                  "table: it was deleted", None)  # fmt: skip

    def _wrong_lease(self, row: dict[str, Any]) -> str | None:
        """Why the row's lease cannot be one its holder set, or None. The expiry moves
        with every renewal, which is not journalled, but a renewal sets it to the
        store's time plus the lease's ttl (journalled when it was taken), never later; a
        run released has no lease."""
        left, ttl = row["lease_left"], self._ttls.get(row["run_id"])
        if row["owner"] is None:
            return None if left is None else "has a lease, but no one holds it"
        if left is not None and ttl is not None and left > ttl + CLOCK_SLACK:
            return (
                f"has a lease that runs out in {left:.0f} s, but its holder took it for "
                f"{ttl:g} s and no renewal sets it further"
            )
        return None


def _created(entry: JournalEntry) -> dict[str, Any]:
    data = entry.data
    run = {
        "status": "running" if entry.event == "run_created" else "queued",
        "plan": data["plan"], "agent": data["agent"], "input": data.get("input"),
        "reason": None, "stopped_by": None, "owner": None, "fencing_token": 0,
        "stop_seq": None, "stop": None,
    }  # fmt: skip
    if "budget" in data:  # journalled, with the creation's exact time, since schema 9
        run.update(budget=data["budget"], created_at=entry.at)
    return run
