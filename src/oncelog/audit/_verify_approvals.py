"""Does each approval row agree with the journal?

The runtime lets an effect through on an approval row only when the journal backs it
(``stores._sql_approvals``); this finds the rows that were forged anyway, so a person
learns of the attempt: a row approved, used, expired or denied with no journalled decision
of that request, for those arguments, by the person it names (a status set by hand, a row
inserted, a copy attached to other arguments), a used approval set back to approved, an
approval whose expiry was moved past the one its decision set, a request whose shown
arguments were edited apart from the hash a decision binds, a row of any status that no
journalled request asked (inserted by hand, or moved to another step or arguments), a
tool other than the journalled request's, and a note other than the journalled decision's
(a denied step's agent receives the note; the runtime gives it the journalled one).

Decisions journalled before requests were named (no ``request`` field) are matched by run,
step and person only, as they were then (their note unchecked); requests journalled then,
by run, step and arguments hash; a request journalled before it named its tool leaves the
tool unchecked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..records._records import Approval, ApprovalStatus, JournalEntry
from ..records._serialization import digest
from ._verify_rows import Found

_DECIDED = {
    ApprovalStatus.APPROVED: "approved",
    ApprovalStatus.USED: "approved",
    ApprovalStatus.EXPIRED: "approved",
    ApprovalStatus.DENIED: "denied",
    ApprovalStatus.EDITED: "edited",  # a person approved other arguments (approval_edited)
}


# The entries that name the approval a step's attempt used: an intent, or the one record
# of a step recorded after it ran (the general path uses an approval for either).
USING = ("intent", "recorded")

# The decision's journal time and the row's ``decided_at`` come from the store's clock in
# one transaction; SQLite reads its clock once per statement, so they may differ slightly.
CLOCK_SLACK = 1.0


@dataclass(frozen=True)
class _Decision:
    status: str  # approved | denied
    step_id: str
    args_hash: str
    by: str
    lapses_at: float | None = None  # when the approval expires, by the journalled decision
    note: str | None = None  # what the person said: a denied step's agent receives it


class ApprovalCheck:
    """Fed every journal entry in order, then given every approval row."""

    def __init__(self) -> None:
        self._decisions: dict[tuple[str, int], _Decision] = {}  # by run and request id
        self._unnamed: set[tuple[str, str, str, str]] = set()  # run, step, status, by
        self._used: set[tuple[str, int]] = set()  # run and approval id, from intents
        # step, arguments hash and tool (None: journalled before requests named it), by run
        # and request id
        self._asked: dict[tuple[str, int], tuple[str, str, str | None]] = {}
        self._asked_unnamed: set[tuple[str, str, str]] = set()  # run, step, args hash

    def feed(self, entry: JournalEntry) -> None:
        """Note a decision or an intent that used an approval; skip a malformed record
        (its broken link is reported by the chain check)."""
        data = entry.data
        try:
            if entry.event in ("approval_approved", "approval_denied", "approval_edited"):
                status, by = entry.event.removeprefix("approval_"), str(data["by"])
                if "request" not in data:
                    self._unnamed.add((entry.run_id, str(data["step_id"]), status, by))
                    return
                lasts = data.get("expires_in")
                note = data.get("note")
                decided = _Decision(
                    status, str(data["step_id"]), str(data["args_hash"]), by,
                    None if lasts is None else entry.at + float(lasts),
                    None if note is None else str(note),
                )  # fmt: skip
                self._decisions[(entry.run_id, int(data["request"]))] = decided
            elif entry.event == "approval_requested":
                asked = (str(data["step_id"]), str(data["args_hash"]))
                if "request" in data:
                    tool = data.get("tool")
                    named = (*asked, None if tool is None else str(tool))
                    self._asked[(entry.run_id, int(data["request"]))] = named
                else:
                    self._asked_unnamed.add((entry.run_id, *asked))
            elif entry.event in USING and data.get("approval") is not None:
                self._used.add((entry.run_id, int(data["approval"])))
        except (KeyError, TypeError, ValueError):
            return

    def compare(self, approvals: Iterable[Approval], found: Found) -> None:
        """Report (to ``found``) each of ``approvals`` the journal does not account for."""
        for approval in approvals:
            wrong = self._wrong(approval)
            if wrong:
                found("state", approval.run_id, f"approval {approval.id} of step "
                      f"{approval.step_id!r}: {wrong}", None)  # fmt: skip

    def _unasked(self, approval: Approval) -> str | None:
        """Why no journalled request asked ``approval``, or None if one did."""
        asked = self._asked.get((approval.run_id, approval.id))
        if asked is None:
            legacy = (approval.run_id, approval.step_id, approval.args_hash)
            if legacy in self._asked_unnamed:
                return None
            return "the journal has no such request: the row was added behind its back"
        if asked[:2] != (approval.step_id, approval.args_hash):
            return (
                f"it asks about step {approval.step_id!r} with arguments {approval.args_hash}; "
                f"the journal's request {approval.id} asked about step {asked[0]!r} with "
                f"arguments {asked[1]}"
            )
        if asked[2] is not None and asked[2] != approval.tool:
            return (
                f"it holds other tool ({approval.tool!r}) than the journal's request "
                f"{approval.id} ({asked[2]!r}): the row was edited"
            )
        return None

    def _wrong(self, approval: Approval) -> str | None:
        if digest(approval.args_json) != approval.args_hash:
            return "its arguments do not match its arguments hash: the row was edited"
        unasked = self._unasked(approval)
        if unasked:
            return unasked
        status = _DECIDED.get(approval.status)
        if status is None:
            if approval.decided_by is not None:
                return f"{approval.status.value}, yet it names {approval.decided_by} as deciding it"
            if approval.note is not None:
                return f"{approval.status.value}, yet it holds a note: nobody decided it"
            return None  # pending or superseded: nobody decided it
        if approval.decided_by is None:
            return f"{approval.status.value} without anyone named; the journal has no such decision"
        said = f"says {approval.decided_by} {status} it"
        decided = self._decisions.get((approval.run_id, approval.id))
        if decided is None:
            unnamed = (approval.run_id, approval.step_id, status, approval.decided_by)
            return None if unnamed in self._unnamed else f"{said}; the journal has no such decision"
        if (decided.status, decided.step_id, decided.args_hash, decided.by) != (
            status, approval.step_id, approval.args_hash, approval.decided_by,
        ):  # fmt: skip
            return (
                f"{said} for arguments {approval.args_hash}; the journal has no such decision "
                f"(it records {decided.by} {decided.status} step {decided.step_id!r} for "
                f"arguments {decided.args_hash})"
            )
        if approval.status is ApprovalStatus.APPROVED and (approval.run_id, approval.id) in (
            self._used
        ):
            return "approved, but an intent already used it: it was set back behind the journal"
        if approval.note != decided.note:
            return "it holds other note than its journalled decision: the row was edited"
        if decided.lapses_at is not None and (
            approval.expires_at is None or approval.expires_at > decided.lapses_at + CLOCK_SLACK
        ):
            return "its expiry was moved past the one its journalled decision set"
        return None
