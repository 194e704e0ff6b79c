"""Versioned schema migrations: one SQL file per version and dialect, applied in order,
each in its own transaction with its version recorded beside it."""

from __future__ import annotations

import os
import re
import sqlite3

from .._exceptions import SchemaTooNew
from ..records._value import NamedTuple

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class Migration(NamedTuple):
    """One numbered schema change of a dialect. (A named tuple: a frozen dataclass costs
    the opening of a ledger its generated methods' compilation.)"""

    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """Split on statement ends, keeping trigger bodies whole."""
        out: list[str] = []
        pending = ""
        for line in self.sql.splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):
                out.append(pending.strip())
                pending = ""
        if pending.strip() and not pending.strip().startswith("--"):
            out.append(pending.strip())
        return [s for s in out if s]


def _files(dialect: str) -> list[tuple[int, str, str]]:
    """(version, name, path) of each migration of ``dialect``, in order."""
    # The package's own folder rather than importlib.resources, which costs every agent a
    # fifth of the package's import time (it imports tempfile, shutil and the compressors).
    folder = os.path.join(os.path.dirname(__file__), "migrations", dialect)
    found = []
    for entry in os.scandir(folder):
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.path))
    return sorted(found)


def _read(version: int, name: str, path: str) -> Migration:
    with open(path, encoding="utf-8") as text:
        return Migration(version, name, text.read())


def migrations(dialect: str) -> list[Migration]:
    return [_read(*found) for found in _files(dialect)]


def pending(dialect: str, current: int, where: str) -> list[Migration]:
    """The migrations a database at version ``current`` still needs, in order (only
    theirs are read: opening a ledger that is up to date reads none); ``SchemaTooNew`` if
    it is newer than this oncelog knows."""
    known = _files(dialect)
    if known and current > known[-1][0]:
        raise SchemaTooNew(
            f"{where} has schema version {current}; this oncelog knows up to "
            f"{known[-1][0]}. Upgrade oncelog."
        )
    return [_read(*found) for found in known if found[0] > current]
