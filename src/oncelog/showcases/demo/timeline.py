"""A run's story, told from its ledger's journal: each process, the steps it replayed and
the ones it took, and what became of the effects it left in doubt. Steps are numbered
from 1, as the agent counts them (``oncelog show`` prints positions, from 0)."""

from __future__ import annotations

from typing import Any

from oncelog import JournalEntry


def _returned(result: Any) -> str:
    """What an effect returned, in a word: the id the service gave it."""
    if isinstance(result, dict):
        for name in ("id", "message_id"):
            if name in result:
                return f"-> {result[name]}"
    return ""


# How a process's part of the run can end; other run events (created, queued again by a
# person's decision) say nothing the surrounding lines do not.
ENDINGS = ("run_completed", "run_halted", "run_waiting", "run_failed")


class _Story:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.steps: dict[int, tuple[str, str]] = {}  # position -> (step id, kind)
        self.processes = 0
        self.in_flight: JournalEntry | None = None  # an intent whose outcome is not yet seen
        self.replay_told = True

    def add(self, entry: JournalEntry) -> None:
        data, seq = entry.data, entry.seq
        if entry.event == "lease_acquired":
            self._died_in_flight()
            self.processes += 1
            self.replay_told = False
            self.lines.append(f"  process {self.processes}")
        elif entry.event in ENDINGS:
            self._died_in_flight()
            self.lines.append(f"  run {entry.event.removeprefix('run_')}")
        elif seq is None:
            return
        elif entry.event == "intent":
            self.steps[seq] = (str(data["step_id"]), str(data["kind"]))
            self.in_flight = entry
        elif entry.event == "recorded":  # a model call or a read, recorded after it ran
            self.steps[seq] = (str(data["step_id"]), str(data["kind"]))
            self._step(seq, str(data["state"]))
        elif entry.event == "outcome":
            effect = self.in_flight is not None and self.in_flight.data["type"] == "effect"
            self.in_flight = None
            self._step(seq, f"{data['state']} {_returned(data['result']) if effect else ''}")
        elif entry.event == "probed":
            found = _returned(data["result"]).removeprefix("-> ")
            self._step(seq, f"in doubt; its probe found {found} at the provider: done")
        elif entry.event == "unknown":
            self._step(seq, "in doubt, with no probe to ask: unknown")
        elif entry.event == "resolved":
            note = f" ({data['note']})" if data.get("note") else ""
            self.lines.append(
                f"  operator  {data['by']} resolved {self.steps[seq][0]} as "
                f"{data['resolution']}{note}"
            )

    def _step(self, seq: int, said: str) -> None:
        if not self.replay_told:
            self.replay_told = True
            if seq > 0:
                self.lines.append(f"    1-{seq:<3} replayed from the ledger: nothing called again")
        step_id, kind = self.steps.get(seq, ("?", "?"))
        self.lines.append(f"    {seq + 1:>2}   {step_id:<17}{kind:<8} {said.rstrip()}")

    def _died_in_flight(self) -> None:
        if self.in_flight is not None and self.in_flight.seq is not None:
            attempt = self.in_flight.data["attempt"]
            self._step(self.in_flight.seq, f"intent (attempt {attempt}), no outcome: killed")
            self.in_flight = None


def timeline(entries: list[JournalEntry]) -> list[str]:
    """The story of one run, a line per event, from its journal entries in order."""
    story = _Story()
    for entry in entries:
        story.add(entry)
    story._died_in_flight()
    return story.lines
