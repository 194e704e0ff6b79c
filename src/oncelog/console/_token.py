"""The console's login token: random, kept in a file only its owner can read."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from oncelog import ConfigurationError

DEFAULT_TOKEN_FILE = Path("~/.config/oncelog/console-token")
MIN_TOKEN_CHARS = 32


def console_token(path: Path, *, rotate: bool = False) -> str:
    """The token kept at ``path``, made (or, with ``rotate``, replaced) with 256 random bits.
    Kept across restarts so a bookmarked login URL still works; a file that others may
    read is refused rather than trusted."""
    path = path.expanduser()
    if rotate or not path.exists():
        return _write_new(path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(
            f"{path} is readable by others (mode {stat.filemode(mode)}): "
            f"run 'chmod 600 {path}', or delete it to get a new token"
        )
    token = path.read_text().strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(f"{path} holds no usable token: delete it to get a new one")
    return token


def _write_new(path: Path) -> str:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    # Created 0600 from the start: the token is never readable by others, not even briefly.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return token
