"""Opening a ledger whose schema is up to date reads no migration file: only the
migrations a database still needs are read (``stores._migrations.pending``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import oncelog
from oncelog.stores import _migrations


def test_an_up_to_date_ledger_opens_without_reading_a_migration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "ledger.db")
    oncelog.open(path).close()  # created: every migration applied
    read: list[str] = []
    real = _migrations._read

    def counting(version: int, name: str, file: str) -> _migrations.Migration:
        read.append(name)
        return real(version, name, file)

    monkeypatch.setattr(_migrations, "_read", counting)
    oncelog.open(path).close()
    assert read == []
    assert [m.version for m in _migrations.pending("sqlite", 3, path)][:1] == [4]
    assert read[:1] == [_migrations.migrations("sqlite")[3].name]
