"""Does each hold's row agree with the journal?

A hold's row decides who may act on a resource (``stores/_sql_holds.py``): an edit there
could hand a live hold to a second run (its holder or the lease it was taken with changed,
its release faked or erased) or let a later holder reuse an earlier token (its token
lowered). Each row must be what its resource's ``hold_acquired`` and ``hold_released``
records leave behind: the last acquisition's run (``holder``), the lease it was taken
with (``holder_token``) and its ``token``; ``acquired_at``, the time of the acquisition
that began the holding (a restart of the holder takes its own hold again and keeps it),
and ``released_at``, the time of the release that ended it, both to the bit. Every
acquisition's token must be greater than the one before it of that resource; a row no
acquisition accounts for, and a resource acquired with no row, are reported.

By run (``--run``): the rows that run holds, against its own records (every record of a
holding is journalled in its holder's run); a deleted row shows only without ``--run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..records._records import JournalEntry
from ..stores._protocol import Store
from ._verify_rows import Found, differences, table

_COLUMNS = ("resource", "holder", "holder_token", "token", "acquired_at", "released_at")


@dataclass
class _Holding:
    holder: str
    holder_token: int  # the holder's fencing token when it took the hold
    token: int
    acquired_at: float
    released_at: float | None = None


@dataclass(frozen=True)
class _Backwards:
    run_id: str
    record_id: int
    resource: str
    before: int
    token: int


class HoldsCheck:
    """Fed every journal entry in order, then given every row of ``holds``."""

    def __init__(self) -> None:
        self._holds: dict[str, _Holding] = {}  # by resource, as the journal leaves it
        self._backwards: list[_Backwards] = []

    def feed(self, entry: JournalEntry) -> None:
        data, event = entry.data, entry.event
        if event == "hold_acquired":
            resource, token = str(data["resource"]), int(data["token"])
            before = self._holds.get(resource)
            if before is not None and token <= before.token:
                self._backwards.append(
                    _Backwards(entry.run_id, entry.id, resource, before.token, token)
                )
            # A restart of the holder: its hold unreleased, taken from nobody, and nobody
            # took it in between (checked by run, the records between are another run's).
            restart = (
                before is not None and before.holder == entry.run_id
                and before.released_at is None and data.get("lapsed_from") is None
                and token == before.token + 1
            )  # fmt: skip
            since = before.acquired_at if restart and before is not None else entry.at
            self._holds[resource] = _Holding(entry.run_id, int(data["lease"]), token, since)
        elif event == "hold_released":
            held = self._holds.get(str(data["resource"]))
            if held is not None and (held.holder, held.token) == (entry.run_id, data["token"]):
                held.released_at = entry.at

    def compare(self, store: Store, run_id: str | None, found: Found) -> None:
        for back in self._backwards:
            found("state", back.run_id, f"the hold on {back.resource} was taken with token "
                  f"{back.token} after token {back.before}: every taking must have a greater "
                  "token (its row's token was lowered behind the journal's back)",
                  back.record_id)  # fmt: skip
        unseen = dict(self._holds)
        for raw in table(store, "holds", run_id):
            row: dict[str, Any] = dict(zip(_COLUMNS, raw, strict=True))
            said = f"the hold on {row['resource']}"
            expected = unseen.pop(row["resource"], None)
            if expected is None:
                found("state", str(row["holder"]), f"{said} is in the holds table but the "
                      "journal never records it taken: it was added behind the journal's back",
                      None)  # fmt: skip
            elif row["released_at"] is None and expected.released_at is not None:
                found("state", expected.holder, f"{said} was released in the journal but is "
                      "held in the holds table: it was made live again behind the journal's "
                      "back", None)  # fmt: skip
            elif wrong := differences(row, vars(expected)):
                found("state", expected.holder, f"{said} holds other {', '.join(wrong)} than "
                      "its journal says: the table was edited", None)  # fmt: skip
        if run_id is not None:
            return  # the rows of this run's other holdings are another run's now
        for resource, expected in sorted(unseen.items()):
            found("state", expected.holder, f"the hold on {resource} (token {expected.token}, "
                  f"run {expected.holder!r}) is in the journal but not in the holds table: "
                  "its row was deleted", None)  # fmt: skip
