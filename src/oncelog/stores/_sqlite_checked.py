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

A store that found the file whole also marks it open (``mark_open``: its process id and
start time in the stamp's place) until it closes it. A process killed, or a machine that
lost power, while the ledger was open leaves that mark and a WAL beside the file; the
next open then finds the marking process gone (``left_by_a_crash``) and does not read the
file through: what a crash can leave is the WAL, and SQLite's own recovery at that open
replays its committed frames and drops any frame a crash cut short (each frame carries a
checksum); the file itself is written only by checkpoints, which fsync the WAL before
copying it in and the file before the WAL is reused (``synchronous`` is at least
``NORMAL`` in every durability), so a checkpoint cut short is done again from the WAL.
Reading the whole file after every kill made a restart's open grow with the ledger (2 ms
per 1,000 steps: docs/benchmarks.md). A mark whose process still runs (another process
has the ledger open), a mark another process's start time owns (its id reused), no mark
(a process that closed while another kept the ledger open takes its own away), or no WAL:
checked as before. A write by another program while the ledger was open, or
between a crash and the restart, is not what this check is for: it is found where a read
meets it, as between two checked opens.
"""

from __future__ import annotations

import os
from contextlib import suppress

STAMP = "-checked"
_OPEN = "open "  # a mark, not an identity: an identity starts with a device number


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
    """Record the file as this store leaves it; nothing if the folder cannot be written
    (the next open checks). If another connection keeps a WAL beside it, the file is not
    left whole: this process's mark is taken away, so that a crash of the other one is
    checked in full (its mark was replaced by this one's, and no mark names it)."""
    if os.path.exists(path + "-wal"):
        with suppress(OSError):
            with open(path + STAMP, encoding="utf-8") as found:
                mine = found.read().startswith(f"{_OPEN}{os.getpid()} ")
            if mine:
                os.unlink(path + STAMP)
        return
    made = f"{path}{STAMP}.{os.getpid()}.tmp"
    try:
        with open(made, "w", encoding="utf-8") as new:
            new.write(_identity(path))
        os.replace(made, path + STAMP)
    except OSError:
        with suppress(OSError):
            os.unlink(made)


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), so that a
    process id reused after a crash or a reboot is not taken for the one that marked the
    file; "" where ``/proc`` is not there (another system: the id alone), None if no such
    process runs."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # The command name in parentheses may hold spaces: count from after it.
            return stat.read().rpartition(")")[2].split()[19]
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except (OSError, IndexError):
        return ""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # another user's process: it runs
        pass
    return ""


def mark_open(path: str) -> None:
    """Mark the file, found whole, as open in this process until ``stamp`` replaces the
    mark at its close; nothing if the folder cannot be written (the next open checks)."""
    pid = os.getpid()
    made = f"{path}{STAMP}.{pid}.tmp"
    try:
        with open(made, "w", encoding="utf-8") as new:
            new.write(f"{_OPEN}{pid} {_started(pid) or ''}")
        os.replace(made, path + STAMP)
    except OSError:
        with suppress(OSError):
            os.unlink(made)


def left_by_a_crash(path: str) -> bool:
    """The file was found whole by a process that is gone without closing it, and the
    WAL it left is beside it: SQLite's recovery is the check such a file needs."""
    try:
        with open(path + STAMP, encoding="utf-8") as stamp:
            left = stamp.read()
        if not left.startswith(_OPEN) or not os.path.exists(path + "-wal"):
            return False
        pid, _, started = left[len(_OPEN) :].partition(" ")
        if int(pid) == os.getpid():
            return False  # this process has it open: another store's mark
        now = _started(int(pid))
        return now is None or (started != "" and now != "" and now != started)
    except (OSError, ValueError):
        return False
