"""What the table checks of ``verify`` share: a row as stored against what its journal
entries leave behind, column by column."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..records._serialization import decode
from ..stores import STATE_TABLES
from ..stores._protocol import Store

PAGE = 1000
# (kind, run_id, message, record_id): how a check tells ``verify`` what it found.
Found = Callable[[str, str, str, int | None], None]
# Columns named as a person reads them; the others by their name.
_SAID = {"step_id": "step id", "args_hash": "argument hash", "args": "arguments"}


def decoded(text: str | None) -> Any:
    """A JSON column's value; text that does not decode stands for itself."""
    if text is None:
        return None
    try:
        return decode(text)
    except ValueError:
        return ("undecodable", text)


def differences(row: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """The columns of ``row`` that differ from ``expected``; a column the journal says
    nothing about (written before it was journalled) is not in ``expected``."""
    return [_SAID.get(name, name) for name, said in expected.items() if row[name] != said]


def table(store: Store, name: str, run_id: str | None) -> Iterator[tuple[Any, ...]]:
    """Every row of a state table, one page at a time, in key order."""
    after: tuple[Any, ...] = ()
    key_width = len(STATE_TABLES[name][0].split(","))  # the key's columns come first
    while page := store.table_rows(name, after, PAGE, run_id):
        yield from page
        after = page[-1][:key_width]
