"""Who owns a run, and whether that owner is certainly gone.

An owner is ``host|pid|start|nonce``. On the same host a dead process is recognised at
once (its pid is gone, is a zombie, or belongs to a newer process), so a supervisor that
restarts a SIGKILLed agent need not wait out the lease. An owner on another host, or a
live but stopped process, is only overtaken when its lease expires by the store's clock.
"""

from __future__ import annotations

import os
import threading

# The node name the kernel reports, which is what socket.gethostname() returns on Linux,
# read without importing socket (and secrets below without random) at import time.
_HOST = os.uname().nodename
_live_nonces: set[str] = set()
_lock = threading.Lock()


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), or None; a zombie counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    state, start = fields[0], fields[19]
    return None if state in ("Z", "X") else start


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# This process's ``host|pid|start``, read from /proc once per pid (a forked child reads
# its own): every run takes a new owner, and opening and reading the file cost more than
# the rest of entering a run's Python. A start time that could not be read is not kept.
_identity: tuple[int, str] | None = None


def _own_identity() -> str:
    global _identity
    pid = os.getpid()
    if _identity is not None and _identity[0] == pid:
        return _identity[1]
    start = _start_time(pid)
    identity = f"{_HOST}|{pid}|{start or '-'}"
    if start is not None:
        _identity = pid, identity
    return identity


def new_owner() -> str:
    """A fresh owner identity for one ``Run`` in this process."""
    nonce = os.urandom(6).hex()  # what secrets.token_hex(6) does
    with _lock:
        _live_nonces.add(nonce)
    return f"{_own_identity()}|{nonce}"


def forget(owner: str) -> None:
    """This process no longer holds ``owner``'s lease (the run closed or was abandoned)."""
    with _lock:
        _live_nonces.discard(owner.rsplit("|", 1)[-1])


def is_dead(owner: str) -> bool:
    parts = owner.split("|")
    if len(parts) != 4 or parts[0] != _HOST:
        return False
    _, pid_text, start, nonce = parts
    pid = int(pid_text)
    if pid == os.getpid():
        with _lock:
            return nonce not in _live_nonces
    if os.path.isdir("/proc"):
        return _start_time(pid) != start
    return not _alive(pid)
