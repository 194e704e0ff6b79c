"""A simulated power loss of a SQLite ledger: an agent runs under ``sync_shim.c``, which
keeps each ledger file's bytes as of its last fsync; ``cut_back`` builds from them the
ledger a machine would find on its disk after losing power at that instant."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .launch import PYTHON, python

SHIM_SOURCE = Path(__file__).with_name("sync_shim.c")
AGENT = Path(__file__).parents[1] / "power_agents" / "agent.py"
AGENT_TIMEOUT = 60.0
LEDGER_FILES = ("ledger.db", "ledger.db-wal")


def build_shim(folder: Path) -> Path:
    """Compile the shim into ``folder`` (never committed: built by each test run)."""
    library = folder / "sync_shim.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(library),
         str(SHIM_SOURCE), "-ldl"],
        check=True, capture_output=True,
    )  # fmt: skip
    return library


@dataclass(frozen=True)
class PowerSetup:
    """One agent's files: the ledger, the provider's record and the shim's snapshots."""

    shim: Path
    folder: Path
    durability: str
    effects: int = 3
    kind: str = "create"
    probe: bool = False

    @property
    def ledger(self) -> Path:
        return self.folder / "ledger.db"

    @property
    def provider(self) -> Path:
        return self.folder / "provider.txt"

    @property
    def synced(self) -> Path:
        return self.folder / "synced"

    def env(self, ledger: Path, crash_at: str | None = None) -> dict[str, str]:
        """A child's environment: the shim loaded, watching ``ledger``."""
        self.synced.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "ONCELOG_CRASH_AT"}
        env.update(
            LD_PRELOAD=str(self.shim), SYNC_SHIM_WATCH=str(ledger.resolve()),
            SYNC_SHIM_DIR=str(self.synced),
        )  # fmt: skip
        if crash_at is not None:
            env["ONCELOG_CRASH_AT"] = crash_at
        return env

    def create(self) -> None:
        """Make the ledger empty, under the shim, so its first fsyncs are recorded too."""
        script = f"import oncelog; oncelog.open({str(self.ledger)!r}).close()"
        subprocess.run(python("-c", script), env=self.env(self.ledger), check=True)

    def run(self, ledger: Path | None = None, crash_at: str | None = None) -> int:
        """Run the agent on ``ledger`` (default: this setup's) until it exits; its code."""
        ledger = ledger or self.ledger
        argv = [PYTHON, str(AGENT), "--ledger", str(ledger), "--provider",
                str(self.provider), "--durability", self.durability, "--kind", self.kind,
                "--effects", str(self.effects)]  # fmt: skip
        argv += ["--probe"] if self.probe else []
        done = subprocess.run(
            argv, env=self.env(ledger, crash_at), capture_output=True, text=True,
            timeout=AGENT_TIMEOUT,
        )  # fmt: skip
        assert done.returncode in (0, 3, -9), done.stderr[-3000:]
        return done.returncode

    def cut_back(self, into: Path) -> Path:
        """The ledger as the disk holds it after a power cut now: each file as it was at
        its last fsync, the rest lost. Returns the copy's path."""
        into.mkdir()
        for name in LEDGER_FILES:
            if (self.synced / name).exists():
                shutil.copyfile(self.synced / name, into / name)
        return into / "ledger.db"

    def syncs(self) -> list[str]:
        """The watched files' base names, once per fsync, in order."""
        log = self.synced / "log"
        return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []

    def calls(self) -> list[str]:
        """The provider's calls, by idempotency key."""
        return self.provider.read_text().split() if self.provider.exists() else []
