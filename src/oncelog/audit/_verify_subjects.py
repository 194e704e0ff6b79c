"""Do the subjects' claims agree with the journal?

A claim is written only by an intent that names its subject (``"subject"`` in the intent
record), in that intent's transaction, and a claim refused rolls its intent back: so the
holder of each subject is the step whose intent named it last, and a row naming any other
step was edited. An effect on a subject claimed for ever (no ``subject_for``) is done by
one step: two steps done under one such subject mean it was done twice. Both are checked
over the whole ledger; verifying one run checks only the claims its steps hold.
"""

from __future__ import annotations

from typing import Any

from ..records._records import JournalEntry
from ..records._transitions import state_after
from ..stores._protocol import Store
from ._verify_rows import Found, table

Step = tuple[str, int]  # run, position


class SubjectsCheck:
    def __init__(self) -> None:
        self._holder: dict[str, tuple[Step, str]] = {}  # by subject: the last claim
        self._claims: dict[Step, tuple[str, bool]] = {}  # the subject, and whether for ever
        self._state: dict[Step, str] = {}  # each claiming step's last state

    def feed(self, entry: JournalEntry) -> None:
        if entry.seq is None:
            return
        data, where = entry.data, (entry.run_id, entry.seq)
        if entry.event == "intent":
            subject = data.get("subject")
            if subject is None:
                self._claims.pop(where, None)
                return
            self._claims[where] = (str(subject), data.get("subject_for") is None)
            self._holder[str(subject)] = (where, str(data["step_id"]))
        elif where not in self._claims:
            return
        if (state := state_after(entry.event, data)) is not None:
            self._state[where] = state

    def compare(self, store: Store, run_id: str | None, found: Found) -> None:
        rows: dict[str, tuple[Any, ...]] = {}
        for subject, run, seq, step_id in table(store, "subjects", run_id):
            rows[subject] = (run, seq, step_id)
            held = self._holder.get(subject)
            if held is None or held != ((run, int(seq)), step_id):
                found("state", run, f"the claim on subject {subject} names step {seq} "
                      f"({step_id}) of run {run!r}, which did not claim it last in the "
                      "journal: the subjects table was edited", None)  # fmt: skip
        if run_id is not None:
            return
        for subject, ((run, seq), step_id) in sorted(self._holder.items()):
            if subject not in rows:
                found("state", run, f"step {seq} ({step_id}) of run {run!r} claimed subject "
                      f"{subject} in the journal, but the subjects table holds no claim on "
                      "it: it was deleted", None)  # fmt: skip
        done: dict[str, list[Step]] = {}
        for where, (subject, for_ever) in sorted(self._claims.items()):
            if for_ever and self._state.get(where) == "done":
                done.setdefault(subject, []).append(where)
        for subject, steps in sorted(done.items()):
            if len(steps) > 1:
                said = ", ".join(f"step {seq} of run {run!r}" for run, seq in steps)
                found("subject_twice", steps[0][0], f"subject {subject} is claimed for ever, "
                      f"but the journal records it done by {said}", None)  # fmt: skip
