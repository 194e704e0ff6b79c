"""The work every measurement shares: the tool, its arguments in the library's encoding,
and a guarded ledger whose tool counts its real calls."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import oncelog

TOOL_NAME = "send_email"
RECIPIENT = "alice@example.com"
BODY = "Hello Alice, your ticket 4711 was resolved; reply to this mail to reopen it. " * 2


def send_email(to: str, subject: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
    """Pure CPU: the bare call is what Python costs to call a tool, no network."""
    return {"id": "msg_" + idempotency_key[-16:], "to": to, "status": "queued"}


def step_args(n: int) -> dict[str, Any]:
    return {"to": RECIPIENT, "subject": f"ticket {n} resolved", "body": BODY}


def canonical(value: Any) -> str:
    """The ledger's JSON encoding, redone here so the bench needs no private function. If
    the library's encoding ever differs, bulk-recorded rows stop replaying (the argument
    hash no longer matches: ArgumentDrift), so a mismatch cannot go unnoticed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class EffectInput:
    """Everything about one effect computed before the clock starts, so the floor times
    only its two transactions (and bulk recording writes exactly what the ledger would)."""

    run_id: str
    step_id: str
    kwargs: dict[str, Any]
    key: str
    args_json: str
    args_hash: str
    result_json: str

    @staticmethod
    def make(run_id: str, n: int, prefix: str = "email-") -> EffectInput:
        step_id = f"{prefix}{n}"
        kwargs = step_args(n)
        key = oncelog.idempotency_key(run_id, step_id, TOOL_NAME)
        args_json = canonical({"args": [], "kwargs": kwargs})
        result_json = canonical(send_email(**kwargs, idempotency_key=key))
        return EffectInput(
            run_id, step_id, kwargs, key, args_json, sha256_hex(args_json), result_json
        )


class CountingTool:
    """``send_email`` declared on one ledger, counting its real calls: a replay must make
    none, which proves it was a replay and not a re-execution."""

    def __init__(self, ledger: oncelog.Ledger) -> None:
        self.calls = 0

        def tool(to: str, subject: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
            self.calls += 1
            return send_email(to, subject, body, idempotency_key=idempotency_key)

        self.tool: oncelog.Tool[..., dict[str, Any]] = ledger.tool(kind="create", name=TOOL_NAME)(
            tool
        )


def open_guarded(
    path: Path | str, durability: Literal["intent", "full", "process"] = "full"
) -> tuple[oncelog.Ledger, CountingTool]:
    """A ledger on ``path`` and the counting tool declared on it."""
    ledger = oncelog.open(str(path), durability=durability)
    return ledger, CountingTool(ledger)


def replay(ledger: oncelog.Ledger, tool: CountingTool, run_id: str, steps: int) -> None:
    """Re-enter ``run_id`` and ask for its ``steps`` recorded effects, as a restarted agent."""
    before = tool.calls
    with ledger.run(run_id) as run:
        for i in range(steps):
            run.effect(f"s{i}", tool.tool, **step_args(i))
    if tool.calls != before:
        raise RuntimeError(f"{run_id}: replay called the tool {tool.calls - before} times")
