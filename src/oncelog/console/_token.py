"""The console's login token: random, kept in a file only its owner can read."""

from __future__ import annotations

from pathlib import Path

from oncelog import private_secret

DEFAULT_TOKEN_FILE = Path("~/.config/oncelog/console-token")


def console_token(path: Path, *, rotate: bool = False) -> str:
    """The token kept at ``path``, made (or, with ``rotate``, replaced) with 256 random bits.
    Kept across restarts so a bookmarked login URL still works; a file that others may
    read is refused rather than trusted."""
    return private_secret(path, "console token", new=rotate)
