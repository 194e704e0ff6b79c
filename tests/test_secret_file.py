"""``oncelog.private_secret``: the one way a secret is kept in a file (the link secret
beside a SQLite ledger, the console's token): private from its first byte, refused when
others may read it or when it is too short, and the same for processes making it at once."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import oncelog
from oncelog.controls._links import link_secret


def test_a_secret_is_made_private_kept_and_replaced_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "config" / "secret"
    secret = oncelog.private_secret(path, "test secret")
    assert len(secret) >= 43  # 32 random bytes, base64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert oncelog.private_secret(path, "test secret") == secret
    replaced = oncelog.private_secret(path, "test secret", new=True)
    assert replaced != secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert oncelog.private_secret(path, "test secret") == replaced
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret"]  # nothing partial left


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_a_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "secret"
    oncelog.private_secret(path, "test secret")
    path.chmod(mode)
    with pytest.raises(oncelog.ConfigurationError, match="readable by others") as refused:
        oncelog.private_secret(path, "test secret")
    assert f"chmod 600 {path}" in str(refused.value)


def test_a_file_too_short_to_be_a_secret_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("short\n")
    path.chmod(0o600)
    with pytest.raises(oncelog.ConfigurationError, match="holds no usable test secret"):
        oncelog.private_secret(path, "test secret")


def test_the_link_secret_and_the_console_token_are_kept_the_same_way(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from oncelog.console import console_token

    ledger = tmp_path / "ledger.db"
    secret = link_secret(str(ledger))
    kept = tmp_path / "link-secret"
    assert kept.read_text().strip().encode() == secret
    token_file = tmp_path / "console-token"
    console_token(token_file)
    for path, read in ((kept, lambda: link_secret(str(ledger))), (token_file,
                       lambda: console_token(token_file))):  # fmt: skip
        path.chmod(0o644)
        with pytest.raises(oncelog.ConfigurationError, match="readable by others"):
            read()


def test_a_maker_beaten_to_it_keeps_the_secret_made_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes found no file and each made one; the other linked its own in place
    between this one's look and its link: this one keeps the other's, so both agree."""
    path, first = tmp_path / "secret", "f" * 43
    link = os.link

    def beaten(source: Path, target: Path) -> None:
        target.write_text(first + "\n")
        target.chmod(0o600)
        link(source, target)

    monkeypatch.setattr(os, "link", beaten)
    assert oncelog.private_secret(path, "test secret") == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"]  # its own removed
