"""The store's journal and checkpoints read whole, one keyset page at a time: no cap, and
no record skipped or read twice however many are appended meanwhile."""

from __future__ import annotations

from collections.abc import Iterator

from ..records._records import Checkpoint, JournalEntry
from ..stores._protocol import Store

PAGE = 1000


def journal(
    store: Store, run_id: str | None, after: int = 0, page: int = PAGE
) -> Iterator[JournalEntry]:
    """Journal records after id ``after`` (of one run, ``""`` for those of no run, or all
    with None), in journal order."""
    while entries := store.journal(run_id, after, page):
        yield from entries
        after = entries[-1].id


def checkpoints(
    store: Store, run_id: str | None, after: int = 0, page: int = PAGE
) -> Iterator[Checkpoint]:
    """Signed checkpoints after id ``after``, in order."""
    while marks := store.checkpoints(run_id, after, page):
        yield from marks
        after = marks[-1].id
