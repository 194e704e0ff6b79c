"""Who owns a run, and whether that owner is certainly gone.

An owner is ``host|pid|start|namespace|nonce``. A pid means something only in its PID
namespace, so ``namespace`` records which one (with the kernel's boot, ``_namespace``),
and an owner's pid is looked at only by a process in that same namespace: there a dead
process is recognised at once (its pid is gone, is a zombie, or belongs to a newer
process), so a supervisor that restarts a SIGKILLed agent need not wait out the lease.
Any other owner (in a container of its own, on another host, an owner whose namespace
could not be told, or one in the older ``host|pid|start|nonce`` form) and a live but
stopped process are only overtaken when the lease expires by the store's clock.
"""

from __future__ import annotations

import os
import threading

# The node name the kernel reports, which is what socket.gethostname() returns on Linux,
# read without importing socket (and secrets below without random) at import time.
_HOST = os.uname().nodename
_UNKNOWN = "-"
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


def _namespace() -> str:
    """Which pids ``/proc`` shows this process: the kernel's boot, its PID namespace and
    its time namespace (a start time is counted from a boot that one may shift); or
    ``_UNKNOWN`` where that cannot be told. A ``/proc`` mounted for another PID namespace
    (an agent that unshared without remounting it) shows other processes under our pids:
    ``/proc/self`` then names another pid than ours."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return _UNKNOWN
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pid_ns = os.stat("/proc/self/ns/pid")
        time_ns = _time_namespace()
    except OSError:
        return _UNKNOWN
    return f"{boot}:{pid_ns.st_dev}:{pid_ns.st_ino}:{time_ns}"


def _time_namespace() -> int:
    """The time namespace's inode; 0 before Linux 5.6, where every process has the boot's."""
    try:
        return os.stat("/proc/self/ns/time").st_ino
    except FileNotFoundError:
        return 0


# This process's ``host|pid|start|namespace``, read from /proc once per pid (a forked
# child reads its own): every run takes a new owner, and opening and reading the files
# cost more than the rest of entering a run's Python. One not fully read is not kept.
_identity: tuple[int, str, str] | None = None


def _own_identity() -> tuple[str, str]:
    """This process's ``host|pid|start|namespace``, and its namespace."""
    global _identity
    pid = os.getpid()
    if _identity is not None and _identity[0] == pid:
        return _identity[1], _identity[2]
    start, namespace = _start_time(pid), _namespace()
    identity = f"{_HOST}|{pid}|{start or _UNKNOWN}|{namespace}"
    if start is not None and namespace != _UNKNOWN:
        _identity = pid, identity, namespace
    return identity, namespace


def new_owner() -> str:
    """A fresh owner identity for one ``Run`` in this process."""
    nonce = os.urandom(6).hex()  # what secrets.token_hex(6) does
    with _lock:
        _live_nonces.add(nonce)
    return f"{_own_identity()[0]}|{nonce}"


def forget(owner: str) -> None:
    """This process no longer holds ``owner``'s lease (the run closed or was abandoned)."""
    with _lock:
        _live_nonces.discard(owner.rsplit("|", 1)[-1])


def is_dead(owner: str) -> bool:
    """True only if ``owner``'s process is certainly gone: it ran in this process's PID
    namespace, and its pid is gone or names another process (in this process, the run
    was closed). A pid this process cannot see proves nothing: False."""
    parts = owner.split("|")
    if len(parts) != 5:  # the older form, which names no namespace
        return False
    _, pid_text, start, namespace, nonce = parts
    ours = _own_identity()[1]
    if namespace != ours or ours == _UNKNOWN or start == _UNKNOWN or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        with _lock:
            return nonce not in _live_nonces
    return _start_time(pid) != start
