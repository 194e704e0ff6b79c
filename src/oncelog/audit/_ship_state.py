"""How far a shipper has delivered the journal, kept in a small state file.

A stream (journal records, or checkpoints) is read in id order, but ids are not visible in
id order: on PostgreSQL a transaction that drew a lower id can commit after one that drew a
higher id (``docs/postgres.md``), and one that rolled back leaves its id unused for ever.
So a stream's position is a low-water mark (every id at or below it is delivered, or is a
gap that settled) plus the ids delivered above it. Each poll reads again from the mark; the
mark passes a gap only once the gap has settled: the record after it is ``settle`` seconds
older than the newest record read (the ledger's own clock, so no clock skew), or this
process has watched the gap for ``settle`` seconds.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError

VERSION = 1
STREAMS = ("records", "checkpoints")


@dataclass
class Position:
    low: int = 0  # every id <= low is delivered, or was never committed
    above: dict[int, float] = field(default_factory=dict)  # delivered ids > low: their ``at``
    watched: dict[int, float] = field(default_factory=dict)  # gap's next id: first seen (mono)

    def delivered(self, rows: list[tuple[int, float]]) -> None:
        self.above.update(rows)

    def advance(self, newest_at: float, now: float, settle: float) -> bool:
        """Move the mark over delivered ids, and over each gap that settled; True if moved."""
        start = self.low
        for ident in sorted(self.above):
            if ident != self.low + 1:
                first_seen = self.watched.setdefault(ident, now)
                if newest_at - self.above[ident] < settle and now - first_seen < settle:
                    break
            self.low = ident
            del self.above[ident]
            self.watched.pop(ident, None)
        return self.low != start

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "above": sorted(self.above.items())}


def load(path: Path) -> dict[str, Position]:
    """The positions kept in ``path``; every stream at its start if there is no such file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {name: Position() for name in STREAMS}
    except OSError as exc:
        raise ConfigurationError(f"cannot read the shipper's state file {path}: {exc}") from exc
    try:
        state = json.loads(text)
        if state["version"] != VERSION:
            raise ValueError(f"version {state['version']!r}, not {VERSION}")
        return {
            name: Position(
                int(state[name]["low"]), {int(i): float(at) for i, at in state[name]["above"]}
            )
            for name in STREAMS
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"{path} is not a shipper's state file: {exc!r}") from exc


def save(path: Path, positions: dict[str, Position]) -> None:
    """Replace the state file atomically: a crash leaves the old one or the new one."""
    state = {"version": VERSION, **{name: positions[name].to_json() for name in STREAMS}}
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(state, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make a file's creation or renaming in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
