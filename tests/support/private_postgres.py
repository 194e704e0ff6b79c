"""A PostgreSQL cluster of a test's own, to stop, freeze and partition: the shared server
at 127.0.0.1:5432 serves other tests and people, and is never faulted.

The cluster is made with ``initdb`` into a temporary directory (as the ``postgres`` user:
initdb refuses root), listens on its own port and its own socket directory, trusts local
connections as ``root``, and is removed afterwards, whatever became of it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from .postgres import execute

TIMEOUT = 60.0
OWNER = "postgres"


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def missing() -> str | None:
    """Why no private cluster can be made here, or None if one can."""
    if _binaries() is None:
        return "PostgreSQL's server binaries (/usr/lib/postgresql/*/bin/initdb)"
    if os.geteuid() != 0 or not shutil.which("runuser"):
        return "root and runuser, to run initdb as the postgres user"
    try:
        pwd.getpwnam(OWNER)
    except KeyError:
        return f"a {OWNER!r} user to own the cluster"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Cluster:
    data: Path
    port: int
    listen: tuple[str, ...]

    def admin_url(self, host: str = "127.0.0.1") -> str:
        return f"postgresql://root@{host}:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        bin_dir = _binaries()
        assert bin_dir is not None
        subprocess.run(
            ["runuser", "-u", OWNER, "--", str(bin_dir / "pg_ctl"), "-D", str(self.data),
             "-w", "-t", str(int(TIMEOUT)), *args],
            check=True, capture_output=True, timeout=TIMEOUT + 10,
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.data} -c listen_addresses={','.join(self.listen)} "
            "-c max_connections=60"
        )
        self._ctl("-o", options, "-l", str(self.data / "server.log"), "start")
        self.wait_until_ready()

    def wait_until_ready(self) -> None:
        """Until the server accepts connections and its recovery is over: while it
        replays the WAL it refuses them ("the database system is in recovery mode")."""
        _wait_for(self._ready, f"the server on port {self.port} to finish its recovery", self)

    def _ready(self) -> bool:
        try:
            rows = execute("SELECT pg_is_in_recovery()", admin=self.admin_url())
        except Exception:  # refused, reset, or FATAL in recovery: not ready yet
            return False
        return rows == [(False,)]

    def crash(self, pid: int) -> None:
        """SIGKILL one of the server's processes, as the OOM killer would: the postmaster
        ends every other one, replays the WAL and accepts connections again. Returns once
        it has; the killed process reaped first, since the postmaster has not begun its
        recovery before it notices the death, and would still answer until then."""
        os.kill(pid, signal.SIGKILL)
        _wait_for(lambda: not Path(f"/proc/{pid}").exists(), f"the postmaster to reap {pid}", self)
        self.wait_until_ready()

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def processes(self) -> list[int]:
        """The postmaster first, then every process it started (backends included)."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with suppress(OSError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    children.append(int(stat.parent.name))
        return [postmaster, *children]

    def freeze(self) -> None:
        """SIGSTOP the whole server: it accepts nothing (the postmaster first, so it
        starts no new backend) and answers nothing, while its kernel still acknowledges
        every packet."""
        for pid in self.processes():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in reversed(self.processes()):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _wait_for(done: Callable[[], bool], what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done():
        if time.monotonic() > deadline:
            log = cluster.data / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise TimeoutError(f"waited {TIMEOUT:g} s for {what}; its log ends:\n{tail}")
        time.sleep(0.05)  # neither a connection refused nor a reaped child can be waited on


@contextmanager
def private_cluster(
    listen: tuple[str, ...] = ("127.0.0.1",), trusted: tuple[str, ...] = ()
) -> Iterator[Cluster]:
    """A new cluster listening on ``listen``, trusting ``root`` from this host and from the
    ``trusted`` addresses; stopped (thawed first) and removed afterwards."""
    bin_dir = _binaries()
    assert bin_dir is not None, missing()
    root = Path(tempfile.mkdtemp(prefix="oncelog-pg-"))
    shutil.chown(root, OWNER, OWNER)
    cluster = Cluster(root / "data", free_port(), listen)
    try:
        subprocess.run(
            ["runuser", "-u", OWNER, "--", str(bin_dir / "initdb"), "-D", str(cluster.data),
             "--auth=trust", "--username=root", "--no-sync", "--encoding=UTF8"],
            check=True, capture_output=True, timeout=TIMEOUT,
        )  # fmt: skip
        with (cluster.data / "pg_hba.conf").open("a") as hba:
            hba.writelines(f"host all root {address}/32 trust\n" for address in trusted)
        cluster.start()
        yield cluster
    finally:
        with suppress(Exception):
            cluster.thaw()
        with suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
