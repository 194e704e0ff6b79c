"""Start the fake provider (``provider.py``) as a separate process and read its records.

The records are read from the provider's own SQLite file, after asking it to become idle,
so they say what happened in the world, not what the agent or the ledger believe.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .launch import python

PROVIDER_SCRIPT = Path(__file__).with_name("provider.py")


@dataclass(frozen=True)
class EffectRecord:
    """One effect the provider performed."""

    id: int
    run: str
    key: str
    payload: Any
    response: dict[str, Any]
    intent_state: str | None  # the ledger's state for the key at the instant of performing


@dataclass(frozen=True)
class RequestRecord:
    """One request the provider answered (or tried to): performed or replayed."""

    run: str
    key: str
    outcome: str
    killed: bool


class Provider:
    """A running provider: its URL, its mode, and its records."""

    def __init__(self, url: str, mode: str, db_path: Path) -> None:
        self.url = url
        self.mode = mode
        self.db_path = db_path

    @property
    def honours_keys(self) -> bool:
        return self.mode == "honours_keys"

    def wait_idle(self) -> None:
        """Return once every request the provider accepted so far has been handled."""
        with urllib.request.urlopen(self.url + "/idle", timeout=60) as answer:
            if not json.loads(answer.read())["idle"]:
                raise AssertionError("the provider did not become idle")

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
        self.wait_idle()
        with closing(sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)) as db:
            db.row_factory = sqlite3.Row
            return db.execute(sql, params).fetchall()

    def effects(self, run: str) -> list[EffectRecord]:
        rows = self._rows("SELECT * FROM effects WHERE run = ? ORDER BY id", (run,))
        return [
            EffectRecord(
                r["id"],
                r["run"],
                r["key"],
                json.loads(r["payload"]),
                json.loads(r["response"]),
                r["intent_state"],
            )
            for r in rows
        ]

    def requests(self, run: str) -> list[RequestRecord]:
        rows = self._rows("SELECT * FROM requests WHERE run = ? ORDER BY id", (run,))
        return [RequestRecord(r["run"], r["key"], r["outcome"], bool(r["killed"])) for r in rows]

    def counts(self, run: str) -> Counter[str]:
        """How many times the effect with each key was performed."""
        return Counter(effect.key for effect in self.effects(run))

    def total(self, run: str) -> int:
        """How many effects the provider performed for ``run``, whatever their keys."""
        return len(self.effects(run))

    def first_response(self, run: str, key: str) -> dict[str, Any] | None:
        """What the provider answered (or would have) the first time it performed ``key``."""
        for effect in self.effects(run):
            if effect.key == key:
                return effect.response
        return None


@contextmanager
def running_provider(
    folder: Path, mode: str, *, delay: float = 0.0, host: str = "127.0.0.1"
) -> Iterator[Provider]:
    """Run a provider in ``folder``, listening on ``host``, until the block ends; reap it
    whatever happens."""
    folder.mkdir(parents=True, exist_ok=True)
    db_path = folder / f"provider-{mode}.db"
    with open(folder / f"provider-{mode}.stderr", "w+") as stderr:
        command = python(str(PROVIDER_SCRIPT), "--mode", mode, "--db", str(db_path))
        process = subprocess.Popen(
            [*command, "--delay", str(delay), "--host", host],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith("PORT "):
                process.wait(timeout=10)
                stderr.seek(0)
                raise RuntimeError(f"the provider did not start: {line!r} {stderr.read()}")
            yield Provider(f"http://{host}:{int(line.split()[1])}", mode, db_path)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
