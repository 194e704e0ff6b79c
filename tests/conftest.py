from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip on a laptop that lacks a tool; under CI a missing tool is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required under CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.db")


@pytest.fixture
def ledger(db_path: str) -> Iterator[oncelog.Ledger]:
    with oncelog.open(db_path) as opened:
        yield opened
