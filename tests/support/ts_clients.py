"""The TypeScript MCP clients of ``tests/gateway_clients/ts/``, installed once and run as
Node processes: ``npm ci`` from the pinned ``package-lock.json`` into a cache folder named
by the lock's hash (shared by test sessions and xdist workers, under a file lock), the
scripts copied beside their ``node_modules``, and each client a process whose stdout is
JSON lines."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parents[1] / "gateway_clients" / "ts"
NODE_REASON = "Node.js 20+ and npm on PATH (the TypeScript MCP client tests run the real SDK)"
# How long a client may take to answer: a hang-only bound, never a timing assertion.
HANG = 90.0


class InstallFailed(RuntimeError):
    """``npm ci`` of the clients failed (its output says why)."""


def node_is_usable() -> bool:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return False
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    major = version.stdout.strip().lstrip("v").split(".")[0]
    return major.isdigit() and int(major) >= 20


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("ONCELOG_TS_CACHE", Path(base) / "oncelog-tests"))


def installed() -> Path:
    """A folder with the lock's ``node_modules`` and the current scripts: ``npm ci`` runs
    the first time a lock is seen (the registry is reached then only)."""
    lock = (SOURCE / "package-lock.json").read_bytes()
    folder = _cache_root() / f"ts-{hashlib.sha256(lock).hexdigest()[:16]}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # one install; the other workers wait for it
        if not (folder / "node_modules" / ".package-lock.json").exists():
            _install(folder)
        for script in SOURCE.glob("*.mjs"):
            _replace(folder / script.name, script.read_bytes())
    return folder


def _install(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    building = Path(tempfile.mkdtemp(prefix=f"{folder.name}-", dir=folder.parent))
    for name in ("package.json", "package-lock.json"):
        shutil.copy(SOURCE / name, building / name)
    done = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=building, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise InstallFailed(f"npm ci of {SOURCE} failed:\n{done.stdout}\n{done.stderr}")
    building.rename(folder)


def _replace(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(data)
    os.replace(temporary, path)


class NodeClient:
    """One ``node SCRIPT SPEC`` process: its JSON-line events as they come (read by a
    thread, so that waiting for one is bounded), and a line of stdin when it waits for one
    (a person's decision made meanwhile)."""

    def __init__(self, folder: Path, script: str, spec: dict[str, Any]) -> None:
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.process = subprocess.Popen(
            ["node", script, json.dumps(spec)], cwd=folder, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_events, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_events(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        self._stderr.extend(self.process.stderr)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def _next(self) -> dict[str, Any] | None:
        try:
            event = self._queue.get(timeout=HANG)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"the TypeScript client hung for {HANG} s") from None
        if event is not None:
            self.events.append(event)
        return event

    def wait_for(self, name: str) -> dict[str, Any]:
        """The next event called ``name``."""
        while (event := self._next()) is not None:
            if event["event"] == name:
                return event
        raise AssertionError(f"the client ended without {name!r}: {self.events} {self.stderr}")

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self) -> list[dict[str, Any]]:
        """Every event, once the process has ended."""
        while self._next() is not None:
            pass
        self._close()
        return self.events

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self._close()

    def _close(self) -> None:
        self.process.wait(timeout=HANG)
        for reader in self._readers:
            reader.join(timeout=HANG)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):  # a line it never read
                    pipe.close()


def outcome(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The last result or error a client printed."""
    return next(e for e in reversed(events) if e["event"] in ("result", "error"))
