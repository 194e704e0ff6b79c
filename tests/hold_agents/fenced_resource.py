"""The provider side of a resource guarded by a hold: a log file that every action
appends to under an exclusive lock, fsynced, and that checks the hold token as a real
provider would (the agent's tool calls it, but it trusts nothing the ledger says).

An action is ``begin <token> <pid>``, some work, ``end <token> <pid>``. At ``begin`` it
records ``violation stale ...`` if a token lower than the highest it has seen acts, and
``violation overlap ...`` if another holder's action is still open and its process alive
(a holder SIGKILLed mid-action leaves its action open, and is no holder any more).
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def _locked(log: Path) -> Iterator[None]:
    with open(f"{log}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if the holder is killed
        yield


def _append(log: Path, line: str) -> None:
    with open(log, "a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def _alive(pid: int) -> bool:
    """Running and not a zombie (a SIGKILLed agent the test has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def _check(log: Path, token: int, pid: int) -> None:
    highest, open_actions = 0, {}
    for word, *rest in lines(log):
        if word == "begin":
            highest = max(highest, int(rest[0]))
            open_actions[rest[1]] = int(rest[0])
        elif word == "end":
            open_actions.pop(rest[1], None)
    if token < highest:
        _append(log, f"violation stale {token} {pid} highest {highest}")
    for other, other_token in open_actions.items():
        if int(other) != pid and _alive(int(other)):
            _append(log, f"violation overlap {token} {pid} with {other_token} {other}")


def act(log: Path, token: int, work: float, *, die: bool = False) -> None:
    """One action on the resource under hold token ``token``; ``die``: the caller is
    SIGKILLed once the action has begun (its outcome never reaches the ledger)."""
    pid = os.getpid()
    with _locked(log):
        _check(log, token, pid)
        _append(log, f"begin {token} {pid}")
    if die:
        os.kill(pid, signal.SIGKILL)
    time.sleep(work)  # the action takes time: another holder acting now would overlap
    with _locked(log):
        _append(log, f"end {token} {pid}")
