"""Secret fields never reach the ledger's files, the logs, the CLI or an export, yet a
restarted run with the same secret replays and another secret is argument drift."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import oncelog

from .support.launch import python

# Values that cannot turn up by chance in hex hashes or timestamps (a CVC of three digits
# could), so finding one anywhere means it leaked.
CARD, CVC, TOKEN = "4242424242424242", "CVC-X9Y", "tok_live_8c1f2e77d0"
KEY = "test-redaction-key-7b1d"


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[Path]:
    """Everything oncelog logs, at every level, into a file."""
    path = tmp_path / "oncelog.log"
    handler = logging.FileHandler(path)
    logger = logging.getLogger("oncelog")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    yield path
    logger.removeHandler(handler)
    logger.setLevel(old_level)
    handler.close()


def charge_tool(ledger: oncelog.Ledger, calls: list[tuple[str, str]]) -> oncelog.Tool[..., Any]:
    @ledger.tool(kind="payment", name="charge", secret=("card_number", "cvc", "token"))
    def charge(card_number: str, amount: int, *, cvc: str, idempotency_key: str) -> dict[str, Any]:
        calls.append((card_number, cvc))  # the provider gets the real values
        return {"id": "ch_1", "amount": amount, "card": {"token": TOKEN, "last4": "4242"}}

    return charge


def every_byte(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


def test_secrets_are_recorded_only_as_keyed_hashes(tmp_path: Path, logged: Path) -> None:
    db = tmp_path / "ledger" / "ledger.db"
    db.parent.mkdir()
    calls: list[tuple[str, str]] = []
    with oncelog.open(str(db), redaction_key=KEY) as ledger:
        charge = charge_tool(ledger, calls)
        with ledger.run("r") as run:
            result = run.effect("charge", charge, CARD, 1200, cvc=CVC)
        assert calls == [(CARD, CVC)]
        assert result["card"]["token"].startswith("redacted:")  # as replay will return it
        assert result["card"]["last4"] == "4242"
        with ledger.run("r") as run:  # a restart with the same card replays
            assert run.effect("charge", charge, CARD, 1200, cvc=CVC) == result
        assert calls == [(CARD, CVC)]
        with (
            pytest.raises(oncelog.ArgumentDrift, match="redacted:"),
            ledger.run("r") as run,
        ):
            run.effect("charge", charge, "4000056655665556", 1200, cvc=CVC)  # another card
        (step,) = ledger.steps("r")
        assert step.args_payload["args"][0].startswith("redacted:")
        assert step.args_payload["args"][1] == 1200
    show = subprocess.run(
        python("-m", "oncelog", "show", "r", "--db", str(db)),
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    export = subprocess.run(
        python("-m", "oncelog", "export", "--db", str(db)),
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    for secret in (CARD, CVC, TOKEN):
        raw = secret.encode()
        assert raw not in every_byte(db.parent), f"{secret} in the ledger's files"
        assert raw not in logged.read_bytes(), f"{secret} in the logs"
        assert raw not in show, f"{secret} in oncelog show"
        assert raw not in export, f"{secret} in oncelog export"
    assert b"redacted:" in show
    assert b"redacted:" in export


def test_a_tool_with_secrets_needs_a_redaction_key(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:
        charge = charge_tool(ledger, [])
        with (
            pytest.raises(oncelog.ConfigurationError, match="redaction_key"),
            ledger.run("r") as run,
        ):
            run.effect("charge", charge, CARD, 1, cvc=CVC)
        assert ledger.steps("r") == []


def test_another_key_hashes_differently(tmp_path: Path) -> None:
    hashes = []
    for n, key in enumerate(("key-one", "key-two")):
        with oncelog.open(str(tmp_path / f"{n}.db"), redaction_key=key) as ledger:
            charge = charge_tool(ledger, [])
            with ledger.run("r") as run:
                run.effect("charge", charge, CARD, 1, cvc=CVC)
            hashes.append(ledger.steps("r")[0].args_payload["args"][0])
    assert hashes[0] != hashes[1]
