"""CPU time spent during a measurement, from ``/proc``: by the whole machine (ours and
anyone else's), and by a local PostgreSQL server's processes."""

from __future__ import annotations

import os
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) ticks of all cores since boot; idle and iowait count as not busy."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def postgres_cpu_seconds() -> float:
    """CPU time of every process named ``postgres``, counting the reaped ones too: a backend
    that exited is in its parent's (the postmaster's) children time, so the difference of
    two readings is what the server spent between them."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended between listing and reading
            continue
        comm, _, rest = text.partition(" (")[2].rpartition(") ")
        if comm == "postgres":
            fields = rest.split()
            # utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the name
            ticks += sum(int(v) for v in fields[11:15])
    return ticks / TICKS_PER_S
