"""What a trial's ledger holds, read through the public API only, so that crashtest judges
an agent by the records a person would look at."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import oncelog

EVERY_RUN = 1 << 30


@dataclass(frozen=True)
class Effect:
    """An effect step, as its first intent recorded it."""

    run_id: str
    seq: int
    step_id: str
    tool: str
    kind: str


@dataclass(frozen=True)
class Evidence:
    runs: tuple[oncelog.RunRecord, ...]
    journal: tuple[oncelog.JournalEntry, ...]

    @property
    def last_id(self) -> int:
        """The journal's newest entry, 0 for an empty journal: what came later is newer."""
        return self.journal[-1].id if self.journal else 0

    def effects(self) -> list[Effect]:
        """Every effect, in the order the agent first attempted them."""
        seen: set[tuple[str, int | None]] = set()
        found = []
        for entry in self.effect_intents():
            if (entry.run_id, entry.seq) not in seen:
                seen.add((entry.run_id, entry.seq))
                data = entry.data
                found.append(
                    Effect(
                        entry.run_id, entry.seq or 0, data["step_id"], data["tool"], data["kind"]
                    )
                )
        return found

    def effect_intents(self) -> list[oncelog.JournalEntry]:
        """The intents of effects, in order (a model call or a read journals one
        ``recorded`` entry, or, in a ledger written before that, an intent too)."""
        return [
            entry
            for entry in self.journal
            if entry.event == "intent" and entry.data.get("type") == "effect"
        ]


def read(ledger: Path) -> Evidence:
    with oncelog.open(str(ledger)) as opened:
        runs = tuple(opened.runs(limit=EVERY_RUN))
        return Evidence(runs, tuple(opened.iter_journal()))
