"""The world the agents act on: a file where every effect appends one JSON line, written
and fsynced before the tool returns. The tests read it to count what really happened; a
probe reads it to find an effect by its idempotency key."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import oncelog


class EffectLog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def perform(self, key: str, tool: str, arguments: Any) -> dict[str, Any]:
        """Do the effect: append it durably and answer like a provider would."""
        receipt = {"id": f"fx_{key[-8:]}", "tool": tool}
        line = json.dumps({"key": key, "tool": tool, "arguments": arguments, "receipt": receipt})
        with self.path.open("a") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
        return receipt

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def made(self, key: Any) -> dict[str, Any] | None:
        """The effect made under ``key``, if one was (the first)."""
        return next((entry for entry in self.entries() if entry["key"] == key), None)

    def probe(self, key: str, *recorded: Any) -> oncelog.ProbeAnswer:
        """What a provider's lookup by idempotency key answers."""
        entry = self.made(key)
        return oncelog.NOT_FOUND if entry is None else oncelog.Found(entry["receipt"])


def count_model_call(path: str | Path) -> int:
    """Append one line per model call really made (tokens spent); return how many so far."""
    with Path(path).open("a") as out:
        out.write("call\n")
    return len(Path(path).read_text().splitlines())


def post_effect(
    provider: str, run: str, payload: dict[str, Any], key: str, *, kill: bool = False
) -> dict[str, Any]:
    """Have the fake provider process perform ``payload`` under ``key`` and return its
    receipt; ``kill``: the provider SIGKILLs this process after performing it, before
    answering (the window between the provider's OK and the agent's record)."""
    body = {"key": key, "run": run, "payload": payload, "pid": os.getpid(),
            "kill_before_answer": kill}  # fmt: skip
    sent = urllib.request.Request(
        provider + "/effect", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(sent, timeout=30) as answer:
        receipt: dict[str, Any] = json.loads(answer.read())
    return receipt
