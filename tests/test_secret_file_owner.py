"""A secret file someone else could have planted is refused (issue 41, item 6): whoever
wrote the link secret can forge decision links, and whoever wrote the console's token
file can log in. ``private_secret`` reads only a plain file of its own, owned by the
effective user (root too: root could read a file of user 65534, but that user chose its
bytes), through no symbolic link; the link secret, the agent that signs links, the
console's link page and the console's token are all refused with it, naming the file and
the way out."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import oncelog
from oncelog.controls._links import link_secret

from .support.console_client import console_client

NOBODY = 65534
CONSOLE = "https://console.example:8470"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def good_secret(path: Path) -> str:
    return oncelog.private_secret(path, "test secret")


def readers(tmp_path: Path) -> list[tuple[Path, Callable[[], object]]]:
    """Each secret file, with what reads it: ``private_secret``, the link secret beside a
    SQLite ledger, an agent that signs links with it, the console's token."""
    pytest.importorskip("starlette")
    from oncelog.console import console_token

    ledger = str(tmp_path / "ledger.db")
    token = tmp_path / "console-token"
    return [
        (tmp_path / "secret", lambda: good_secret(tmp_path / "secret")),
        (tmp_path / "link-secret", lambda: link_secret(ledger)),
        (tmp_path / "link-secret", lambda: oncelog.open(ledger, notify_console_url=CONSOLE)),
        (token, lambda: console_token(token)),
    ]


@as_root
@pytest.mark.parametrize("which", range(4))
def test_a_secret_of_another_user_is_refused_even_by_root(tmp_path: Path, which: int) -> None:
    path, read = readers(tmp_path)[which]
    good_secret(path)
    os.chown(path, NOBODY, NOBODY)  # mode 0600 still: only its owner (and root) reads it
    with pytest.raises(oncelog.ConfigurationError, match=f"belongs to user {NOBODY}") as refused:
        read()
    assert str(path) in str(refused.value)
    assert f"rm {path}" in str(refused.value)  # the way out: a new one of this user's own
    path.unlink()
    read()  # made again, this user's own
    assert path.stat().st_uid == os.geteuid()


@pytest.mark.parametrize("which", range(4))
def test_a_symbolic_link_to_a_good_secret_is_refused(tmp_path: Path, which: int) -> None:
    path, read = readers(tmp_path)[which]
    elsewhere = tmp_path / "elsewhere" / "secret"
    good_secret(elsewhere)  # 0600, this user's own: good, but not the file named
    path.symlink_to(elsewhere)
    with pytest.raises(oncelog.ConfigurationError, match="is a symbolic link") as refused:
        read()
    assert f"rm {path}" in str(refused.value)


def test_a_dangling_symbolic_link_is_refused_and_not_followed(tmp_path: Path) -> None:
    path, target = tmp_path / "secret", tmp_path / "planted-target"
    path.symlink_to(target)
    with pytest.raises(oncelog.ConfigurationError, match="is a symbolic link"):
        good_secret(path)
    assert not target.exists()  # nothing was written where the link points
    assert path.is_symlink()


def test_a_folder_in_its_place_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.mkdir(mode=0o700)
    with pytest.raises(oncelog.ConfigurationError, match="not a plain file"):
        good_secret(path)


@as_root
def test_the_console_refuses_links_under_a_planted_secret(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.db"
    with oncelog.open(str(ledger_path)) as ledger:
        planted = tmp_path / "link-secret"
        good_secret(planted)
        os.chown(planted, NOBODY, NOBODY)
        with console_client(ledger, login=False) as person:
            page = person.get("/link/anything.at-all")
        assert page.status_code == 503, page.text
        assert f"{planted} belongs to user {NOBODY}" in page.text
        assert "This link decides nothing" in page.text
