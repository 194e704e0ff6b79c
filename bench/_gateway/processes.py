"""The processes a measurement runs against: the upstream MCP server and ``oncelog
gateway`` in front of it, each started fresh, waited for until it answers, read for CPU
from ``/proc`` and stopped at the end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOKEN_ENV = "ONCELOG_BENCH_GATEWAY_TOKEN"
TOKEN = "bench-token-0123456789abcdef"
# Replicas on PostgreSQL sign requestStates and decision links with a shared secret.
LINK_SECRET = "bench-link-secret-0123456789abcdef"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a live process so far (its own threads; no children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    for _ in range(600):
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within 60 s")


@contextmanager
def started(argv: list[str], port: int, what: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for_port(port, process, what)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def upstream() -> tuple[list[str], int]:
    port = free_port()
    return [sys.executable, str(HERE / "upstream.py"), str(port)], port


def gateway_config(folder: Path, upstream_url: str) -> Path:
    config = {
        "upstreams": {"mail": {"url": upstream_url}},
        "tools": {"send_email": "create"},
        "clients": {"bench": {"token_env": TOKEN_ENV, "runs": ["*"], "tools": ["*"]}},
    }
    path = folder / "gateway.json"
    path.write_text(json.dumps(config))
    return path


def gateway(config: Path, ledger: str) -> tuple[list[str], int]:
    port = free_port()
    argv = [sys.executable, "-m", "oncelog", "gateway", "--config", str(config),
            "--listen", f"127.0.0.1:{port}", "--ledger", ledger]  # fmt: skip
    return argv, port
