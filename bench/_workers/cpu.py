"""CPU time spent during a measurement, from ``/proc``: by the whole machine (ours and
anyone else's), and by the PostgreSQL cluster a benchmark uses (its postmaster and the
postmaster's descendants, not every ``postgres`` process on the machine)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from . import postgres

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) ticks of all cores since boot; idle and iowait count as not busy."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _stat_fields(pid: int | str) -> list[str] | None:
    """stat(5) of a process, from its state on (the name and its parentheses cut off)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # the process ended between listing and reading
        return None
    return text.rpartition(") ")[2].split()


def _ticks(fields: list[str]) -> int:
    # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the name.
    return sum(int(v) for v in fields[11:15])


def postmaster_of(url: str) -> int:
    """The pid of the postmaster serving ``url``: the parent of this connection's backend,
    checked against the first line of the data directory's ``postmaster.pid`` where this
    process may read it."""
    with postgres.connect(url) as conn:
        backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        directory = str(conn.execute("SHOW data_directory").fetchone()[0])
        fields = _stat_fields(backend)
    if fields is None:
        raise RuntimeError(f"the backend {backend} of {url} is not a process of this machine")
    parent = int(fields[1])
    try:
        listed = int(Path(directory, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return parent
    if listed != parent:
        raise RuntimeError(f"{url}: the backend's parent {parent} is not the postmaster {listed}")
    return parent


def cluster_cpu(url: str) -> Callable[[], float]:
    """A reading of the CPU seconds the cluster serving ``url`` has used so far: its
    postmaster's and every live descendant's, with the reaped ones counted too (a backend
    that exited is in its parent's children time), so the difference of two readings is
    what that server spent between them."""
    postmaster = postmaster_of(url)

    def seconds() -> float:
        return sum(cluster_ticks(postmaster).values()) / TICKS_PER_S

    return seconds


def cluster_ticks(postmaster: int) -> dict[int, int]:
    """The CPU ticks of ``postmaster`` and of each of its live descendants, by pid."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(entry.name)
        if fields is not None:
            parents[int(entry.name)], ticks[int(entry.name)] = int(fields[1]), _ticks(fields)
    if postmaster not in ticks:
        raise RuntimeError(f"the postmaster {postmaster} is gone")
    return {pid: t for pid, t in ticks.items() if _descends(pid, postmaster, parents)}


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = parents.get(pid, 0)
    return False
