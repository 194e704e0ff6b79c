"""The journal as JSON lines, for shipping it out of the machine and verifying it there.

One object per line: ``{"type": "record", "id", "run_id", "seq", "event", "data", "at",
"hash"}`` with ``data`` the record's JSON text exactly as stored (what its hash covers),
and ``{"type": "checkpoint", "id", "run_id", "entries", "head", "at", "key_id",
"signature"}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from ..records._records import Checkpoint, JournalEntry
from ..records._value import as_dict
from ..stores._protocol import Store
from . import _pages as pages


def record_line(entry: JournalEntry) -> str:
    return json.dumps({
        "type": "record", "id": entry.id, "run_id": entry.run_id, "seq": entry.seq,
        "event": entry.event, "data": entry.data_json, "at": entry.at, "hash": entry.hash,
    }, ensure_ascii=False)  # fmt: skip


def checkpoint_line(mark: Checkpoint) -> str:
    return json.dumps({"type": "checkpoint", **as_dict(mark)}, ensure_ascii=False)


def export_lines(
    store: Store, *, run_id: str | None = None, after_id: int = 0, checkpoints: bool = True
) -> Iterator[str]:
    """Records after ``after_id`` in journal order, then the checkpoints."""
    yield from (record_line(entry) for entry in pages.journal(store, run_id, after_id))
    if checkpoints:
        yield from (checkpoint_line(mark) for mark in pages.checkpoints(store, run_id))
