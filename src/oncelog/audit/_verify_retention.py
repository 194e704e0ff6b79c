"""Does the retention policy hold what the journal says was set?

Each row of ``retention_policy`` is the last ``retention_set`` of its agent ('' the
ledger's window), with its window and who set it; a window removed has no row. A window
shortened behind the journal's back would have ``oncelog prune`` remove runs earlier than
anyone decided. ``set_at`` is shown, never read, and not checked.
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
