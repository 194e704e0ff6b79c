"""A secret kept in a file only its owner can read: the link secret beside a SQLite ledger
and the console's login token. Made with 256 random bits, 0600 from the start; a file
that others may read is refused rather than trusted, and so is one too short to be a
secret."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ._exceptions import ConfigurationError

MIN_SECRET_CHARS = 32


def private_secret(path: Path, what: str, *, new: bool = False) -> str:
    """The ``what`` (a link secret, a console token) kept at ``path``: made when missing,
    or, with ``new``, replaced. Raises ``ConfigurationError`` when the file is readable by
    others or holds fewer than ``MIN_SECRET_CHARS`` characters."""
    path = path.expanduser()
    if new or not path.exists():
        _write(path, replace=new)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(
            f"{path} is readable by others (mode {stat.filemode(mode)}): anyone who reads "
            f"it has the {what}; run 'chmod 600 {path}', or delete it to get a new one"
        )
    secret = path.read_text().strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigurationError(f"{path} holds no usable {what}: delete it to get a new one")
    return secret


def _write(path: Path, *, replace: bool) -> None:
    """Written whole under another name, 0600 from the start (never readable by others,
    not even briefly), then put in place: replacing what is there, or linked, so that two
    processes making it together agree on the one linked first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        if replace:
            os.replace(partial, path)
        else:
            os.link(partial, path)
    except FileExistsError:
        pass  # another process made it first: its secret is the one
    finally:
        partial.unlink(missing_ok=True)
