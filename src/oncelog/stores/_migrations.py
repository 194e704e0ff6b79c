"""Versioned schema migrations: one SQL file per version and dialect, applied in order,
each in its own transaction with its version recorded beside it."""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass

from .._exceptions import SchemaTooNew

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    """One numbered schema change of a dialect."""

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
    folder = os.path.join(os.path.dirname(__file__), "migrations", dialect)
    found = []
    for entry in os.scandir(folder):
        match = _NAME.match(entry.name)
        if match:
            with open(entry.path, encoding="utf-8") as text:
                found.append(Migration(int(match.group(1)), entry.name, text.read()))
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
