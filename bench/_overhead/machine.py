"""Facts about the machine and the disk, printed above the numbers they explain."""

from __future__ import annotations

import os
import platform
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import oncelog


@dataclass(frozen=True)
class Machine:
    cpus: int
    cpu_model: str
    kernel: str
    python: str
    sqlite: str
    oncelog: str
    directory: str
    filesystem: str
    device: str
    mount_options: str
    write_cache: str


def mount_of(path: Path) -> tuple[str, str, str, str]:
    """(mount point, fs type, device, options) of the mount holding ``path``."""
    best = ("/", "?", "?", "?")
    real = str(path.resolve())
    with open("/proc/mounts") as mounts:
        for line in mounts:
            device, point, fstype, options = line.split()[:4]
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[0]):
                best = (point, fstype, device, options)
    return best


def write_cache_of(device: str) -> str:
    name = Path(device).name.rstrip("0123456789") if device.startswith("/dev/") else ""
    cache = Path("/sys/block") / name / "queue" / "write_cache"
    try:
        return cache.read_text().strip() if name else "?"
    except OSError:
        return "?"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return "?"


def describe_machine(directory: Path) -> Machine:
    _, fstype, device, options = mount_of(directory)
    return Machine(
        cpus=len(os.sched_getaffinity(0)),
        cpu_model=cpu_model(),
        kernel=platform.release(),
        python=platform.python_version(),
        sqlite=sqlite3.sqlite_version,
        oncelog=oncelog.__version__,
        directory=str(directory),
        filesystem=fstype,
        device=device,
        mount_options=options,
        write_cache=write_cache_of(device),
    )


def load_average() -> str:
    """1-minute load: other work on the machine shows up here, and in the spreads."""
    return f"{os.getloadavg()[0]:.2f}"
