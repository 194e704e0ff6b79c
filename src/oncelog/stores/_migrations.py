"""Versioned schema migrations: one SQL file per version and dialect, applied in order,
each in its own transaction with its version recorded beside it."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import SchemaTooNew

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
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


def migrations(dialect: str) -> list[Migration]:
    # The package's own folder rather than importlib.resources, which costs every agent a
    # fifth of the package's import time (it imports tempfile, shutil and the compressors).
    folder = Path(__file__).with_name("migrations") / dialect
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    return sorted(found, key=lambda m: m.version)


def pending(dialect: str, current: int, where: str) -> list[Migration]:
    """The migrations a database at version ``current`` still needs, in order;
    ``SchemaTooNew`` if it is newer than this oncelog knows."""
    known = migrations(dialect)
    if known and current > known[-1].version:
        raise SchemaTooNew(
            f"{where} has schema version {current}; this oncelog knows up to "
            f"{known[-1].version}. Upgrade oncelog."
        )
    return [migration for migration in known if migration.version > current]
