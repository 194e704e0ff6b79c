"""Whether an existing SQLite ledger must be checked for damage when it is opened.

``PRAGMA quick_check`` reads the whole file (about 2 ms per 1,000 steps), so it is run
only on a file that may have changed since a process of oncelog last left it whole. A
store that checked the file at its open, or found it unchanged, and then closes it as
the last connection (SQLite has folded the WAL into it and removed the WAL) writes a
stamp beside it: the file's device, inode, size, and modification and change times to
the nanosecond. The next open that finds no WAL and the same stamp skips the check. A
write by anything else (a stray write, a restore, a copy: a new inode or a new change
time, which no user can set back) or a process that did not close (a WAL left beside the
file, or another process's still open) means a check, as before.
"""

from __future__ import annotations

import os
from contextlib import suppress

STAMP = "-checked"


def _identity(path: str) -> str:
    found = os.stat(path)
    return f"{found.st_dev} {found.st_ino} {found.st_size} {found.st_mtime_ns} {found.st_ctime_ns}"


def unchanged(path: str) -> bool:
    """The file is as a store that had checked it left it, nothing beside it since."""
    try:
        with open(path + STAMP, encoding="utf-8") as stamp:
            left = stamp.read()
        return not os.path.exists(path + "-wal") and left == _identity(path)
    except (OSError, ValueError):
        return False


def stamp(path: str) -> None:
    """Record the file as this store leaves it; nothing if another connection keeps a
    WAL beside it or the folder cannot be written (the next open checks)."""
    if os.path.exists(path + "-wal"):
        return
    made = f"{path}{STAMP}.{os.getpid()}.tmp"
    try:
        with open(made, "w", encoding="utf-8") as new:
            new.write(_identity(path))
        os.replace(made, path + STAMP)
    except OSError:
        with suppress(OSError):
            os.unlink(made)
