"""Does the retention policy hold what the journal says was set?

Each row of ``retention_policy`` is the last ``retention_set`` of its agent ('' the
ledger's window), with its window and who set it; a window removed has no row. A window
shortened behind the journal's back would have ``oncelog prune`` remove runs earlier than
anyone decided. ``set_at`` is shown, never read, and not checked.

Each row of ``pruned_runs`` (a tombstone) names a run that a ``runs_pruned`` record (its
anchor) removed and no ``pruned_run_forgotten`` has let go since: a tombstone removed
behind the journal's back would let the run's effects run again. Its status and agent are
not in the anchor, and not checked.
"""

from __future__ import annotations

from typing import Any

from ..records._records import JournalEntry
from ..stores._protocol import Store
from ._verify_rows import Found, table


class RetentionCheck:
    def __init__(self) -> None:
        self._policy: dict[str, dict[str, Any] | None] = {}  # by agent: the last set

    def feed(self, entry: JournalEntry) -> None:
        if entry.run_id != "" or entry.event != "retention_set":
            return
        data = entry.data
        keep = data["keep"]
        self._policy[str(data["agent"])] = (
            None if keep is None else {"keep": float(keep), "set_by": data["by"]}
        )

    def compare(self, store: Store, run_id: str | None, found: Found) -> None:
        expected = dict(self._policy)
        for agent, keep, set_by in table(store, "retention_policy", run_id):
            said = expected.pop(agent, None)
            whose = "the ledger's retention" if agent == "" else f"agent {agent!r}'s retention"
            if said is None:
                found("state", "", f"{whose} is in the retention_policy table but not in the "
                      "journal: it was set behind the journal's back", None)  # fmt: skip
            elif (float(keep), set_by) != (said["keep"], said["set_by"]):
                found("state", "", f"{whose} holds another window or setter than its journal "
                      "says: the table was edited", None)  # fmt: skip
        for agent, said in sorted(expected.items()):
            if said is not None:
                whose = "the ledger's retention" if agent == "" else f"agent {agent!r}'s retention"
                found("state", "", f"{whose} is in the journal but not in the retention_policy "
                      "table: it was removed", None)  # fmt: skip


class TombstonesCheck:
    def __init__(self) -> None:
        self._anchors: dict[str, int] = {}  # by pruned run: the anchor that removed it

    def feed(self, entry: JournalEntry) -> None:
        if entry.run_id != "":
            return
        if entry.event == "runs_pruned":
            for run in entry.data["runs"]:
                self._anchors[str(run[0])] = entry.id
        elif entry.event == "pruned_run_forgotten":
            self._anchors.pop(str(entry.data["run_id"]), None)

    def compare(self, store: Store, run_id: str | None, found: Found) -> None:
        expected = dict(self._anchors)
        for pruned, anchor in table(store, "pruned_runs", run_id):
            said = expected.pop(pruned, None)
            if said is None:
                found("state", "", f"run {pruned!r} has a tombstone but no prune in the journal "
                      "removed it: it was added behind the journal's back", None)  # fmt: skip
            elif int(anchor) != said:
                found("state", "", f"pruned run {pruned!r} has a tombstone naming another anchor "
                      "than the journal: the table was edited", None)  # fmt: skip
        if run_id is not None:
            return  # one run's check reads no table of no run
        for pruned in sorted(expected):
            found("state", "", f"pruned run {pruned!r} has no tombstone: it was removed behind "
                  "the journal's back, and the run could start again", None)  # fmt: skip
