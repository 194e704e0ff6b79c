"""Do the controls' tables hold what the journal says was decided?

Kill switches: every row of ``halts`` is one ``halt_set`` of its switch, in order, with its
reason and who set it, and, once cleared, the ``halt_cleared`` that says who cleared it and
why. Agents' daily budgets: each row is the last ``agent_budget_set`` of its agent.
Result contracts: each row of a tool whose contract is journalled is the last
``result_declared`` of that tool (a row declared before contracts were journalled is not
checked: nothing tells it from one inserted by hand, and ``resolve`` reads the journalled
one wherever there is one).
Approvals: each decision in the table is a person's decision of that request, for those
arguments, in the journal (``_verify_approvals``). The times of
halts and agent budgets (``set_at``, ``cleared_at``) are shown, never read, and not
checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from .._exceptions import CorruptRecord
from ..records._records import Approval, JournalEntry
from ..stores import HALT_COLUMNS, approval_record
from ..stores._protocol import Store
from ._verify_approvals import ApprovalCheck
from ._verify_rows import Found, decoded, differences, table

_HALT_COLUMNS = tuple(HALT_COLUMNS.split(", "))
Switch = tuple[str, str]  # scope, target


class ControlsCheck:
    def __init__(self) -> None:
        self._halts: dict[Switch, list[dict[str, Any]]] = {}  # each time it was set
        self._agent_budgets: dict[str, dict[str, Any] | None] = {}
        self._approvals = ApprovalCheck()
        self._contracts: dict[str, Any] = {}  # the last journalled contract, by tool

    def feed(self, entry: JournalEntry) -> None:
        self._approvals.feed(entry)
        data, event = entry.data, entry.event
        if event == "halt_set":
            self._halts.setdefault((str(data["scope"]), str(data["target"])), []).append(
                {"reason": data["reason"], "set_by": data["by"], "cleared_by": None,
                 "note": None, "cleared": False}
            )  # fmt: skip
        elif event == "halt_cleared":
            times = self._halts.get((str(data["scope"]), str(data["target"])))
            if times:
                times[-1].update(cleared_by=data["by"], note=data["note"], cleared=True)
        elif event == "result_declared":
            self._contracts[str(data["tool"])] = data["contract"]
        elif event == "agent_budget_set":
            budget = data["budget"]
            self._agent_budgets[str(data["agent"])] = (
                None if budget is None else {"budget": budget, "set_by": data["by"]}
            )

    def compare(self, store: Store, run_id: str | None, found: Found) -> None:
        self._compare_halts(store, run_id, found)
        self._compare_agent_budgets(store, run_id, found)
        self._compare_approvals(store, run_id, found)
        self._compare_contracts(store, run_id, found)

    def _compare_halts(self, store: Store, run_id: str | None, found: Found) -> None:
        seen: Counter[Switch] = Counter()
        for raw in table(store, "halts", run_id):
            row = dict(zip(_HALT_COLUMNS, raw, strict=True))
            switch = (row["scope"], row["target"])
            row["cleared"] = row["cleared_at"] is not None
            times = self._halts.get(switch, [])
            seen[switch] += 1
            said = f"halt {row['id']} (the {switch[0]} kill switch {switch[1]!r})"
            if seen[switch] > len(times):
                found("state", _run_of(switch), f"{said} is in the halts table but not in "
                      "the journal: it was set behind the journal's back", None)  # fmt: skip
                continue
            expected = times[seen[switch] - 1]
            if row["cleared"] and not expected["cleared"]:
                found("state", _run_of(switch), f"{said} is on in the journal but off in the "
                      "halts table: it was cleared behind the journal's back", None)  # fmt: skip
            elif wrong := differences(row, expected):
                found("state", _run_of(switch), f"{said} holds other {', '.join(wrong)} than "
                      "its journal says: the table was edited", None)  # fmt: skip
        for switch, times in sorted(self._halts.items()):
            if seen[switch] < len(times):
                found("state", _run_of(switch), f"the {switch[0]} kill switch {switch[1]!r} was "
                      f"set {len(times)} times in the journal but has {seen[switch]} rows in the "
                      "halts table: a row was deleted", None)  # fmt: skip

    def _compare_agent_budgets(self, store: Store, run_id: str | None, found: Found) -> None:
        for agent, budget, set_by in table(store, "agent_budgets", run_id):
            expected = self._agent_budgets.pop(agent, None)
            row = {"budget": decoded(budget), "set_by": set_by}
            if expected is None:
                found("state", "", f"agent {agent!r} has a daily budget in the agent_budgets "
                      "table that the journal does not: it was set behind the journal's back",
                      None)  # fmt: skip
            elif wrong := differences(row, expected):
                found("state", "", f"the daily budget of agent {agent!r} holds other "
                      f"{', '.join(wrong)} than its journal says: the table was edited",
                      None)  # fmt: skip
        for agent, expected in sorted(self._agent_budgets.items()):
            if expected is not None:
                found("state", "", f"agent {agent!r} has a daily budget in the journal but not "
                      "in the agent_budgets table: it was removed", None)  # fmt: skip

    def _compare_contracts(self, store: Store, run_id: str | None, found: Found) -> None:
        for tool, contract in table(store, "result_contracts", run_id):
            if tool not in self._contracts:
                continue  # declared before contracts were journalled
            if decoded(contract) != self._contracts.pop(tool):
                found("state", "", f"the result contract of tool {tool!r} holds other "
                      "contract than its journal says: the table was edited", None)  # fmt: skip
        for tool in sorted(self._contracts):
            found("state", "", f"the result contract of tool {tool!r} is in the journal but "
                  "not in the result_contracts table: it was deleted", None)  # fmt: skip

    def _compare_approvals(self, store: Store, run_id: str | None, found: Found) -> None:
        self._approvals.compare(_approvals(table(store, "approvals", run_id), found), found)


def _approvals(rows: Iterable[tuple[Any, ...]], found: Found) -> Iterator[Approval]:
    """The approval rows as records; a status oncelog does not know is reported."""
    for row in rows:
        try:
            yield approval_record(row)
        except CorruptRecord as exc:
            found("state", str(row[1]), exc.message, None)


def _run_of(switch: Switch) -> str:
    """A run's switch is journalled with the run; an agent's or the global one under ''."""
    return switch[1] if switch[0] == "run" else ""
