"""``oncelog mcp-proxy`` for real: an MCP client (the ``mcp`` package's ClientSession) talks
to the proxy, which starts a low-level MCP server whose tools write to an effect log.

The proxy is SIGKILLed right after an effect's outcome is recorded; the restarted client
calls its tools again from the top and gets the recorded results; the destructive tool
answers with a tool error until a person approves it with ``oncelog approve``. Each effect
happens once, by the effect log's own records."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import ROOT, require_framework, run_agent
from .support import oncelog_cli

TOOLS = {"lookup": "read", "send_email": "create", "delete_account": "destructive"}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": TOOLS}))
    return path


def outputs(exit_stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in exit_stdout.splitlines() if line.startswith("{")]


def test_restarted_client_gets_recorded_results_and_waits_for_approval(
    tmp_path: Path, config: Path
) -> None:
    require_framework("mcp", "mcp")
    ledger, log = tmp_path / "ledger.db", EffectLog(tmp_path / "effects.jsonl")
    args = ["--ledger", str(ledger), "--effects", str(log.path), "--config", str(config)]
    args += ["--run", "ticket-5"]

    first = run_agent("mcp_agent", *args, crash_at="after_outcome_commit@send_email#1")
    assert first.returncode != 0, first  # the proxy died under the client
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1}

    second = run_agent("mcp_agent", *args)
    assert second.returncode == 4, second
    waiting = outputs(second.stdout)[-1]
    assert waiting["tool"] == "delete_account"
    assert waiting["error"]
    assert "oncelog approve ticket-5 delete_account#1" in waiting["text"]
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1}

    oncelog_cli(str(ledger), "approve", "ticket-5", "delete_account#1", "--by", "alice")
    third = run_agent("mcp_agent", *args)
    assert third.returncode == 0, third
    assert [o["error"] for o in outputs(third.stdout)] == [False, False, False]
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "delete_account": 1}
    with oncelog.open(str(ledger)) as opened:
        steps = opened.steps("ticket-5")
    assert [(s.step_id, s.state, s.attempts) for s in steps] == [
        ("lookup#1", StepState.DONE, 1),
        ("send_email#1", StepState.DONE, 1),
        ("delete_account#1", StepState.DONE, 1),
    ]


def test_client_calls_again_in_the_same_session_once_approved(tmp_path: Path, config: Path) -> None:
    require_framework("mcp", "mcp")
    import anyio
    import mcp.types as types
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    ledger, log = tmp_path / "ledger.db", EffectLog(tmp_path / "effects.jsonl")
    server = [
        sys.executable,
        "-m",
        "tests.integration_agents.mcp_server",
        "--effects",
        str(log.path),
    ]
    proxy = StdioServerParameters(
        command=sys.executable,
        args=["-m", "oncelog", "mcp-proxy", "--db", str(ledger), "--config", str(config),
              "--", *server],
        env=dict(os.environ), cwd=ROOT,
    )  # fmt: skip
    meta = cast(types.RequestParamsMeta, {"oncelog/run_id": "ticket-6"})

    async def call(session: ClientSession, tool: str) -> types.CallToolResult:
        return await session.call_tool(tool, {"customer": "cus_bob"}, meta=meta)

    async def work() -> list[bool | None]:
        async with stdio_client(proxy) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            errors: list[bool | None] = [(await call(session, "send_email")).is_error]
            errors.append((await call(session, "delete_account")).is_error)
            with oncelog.open(str(ledger)) as opened:
                opened.approve("ticket-6", "delete_account#1", by="alice")
            errors.append((await call(session, "delete_account")).is_error)
            return errors

    assert anyio.run(work) == [False, True, False]
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "delete_account": 1}
    with oncelog.open(str(ledger)) as opened:
        steps = opened.steps("ticket-6")
        run = opened.get_run("ticket-6")
    assert [(s.step_id, s.state) for s in steps] == [
        ("send_email#1", StepState.DONE),
        ("delete_account#1", StepState.DONE),
    ]
    assert run.status is oncelog.RunStatus.RUNNING  # the client never said it was done


def _proxy_pid(ledger: Path) -> int | None:
    """The pid of the ``oncelog mcp-proxy`` serving ``ledger`` (the client started it)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp-proxy" in argv and str(ledger).encode() in argv:
            return int(proc.name)
    return None


def test_sigterm_drains_the_proxy_instead_of_leaving_a_call_in_doubt(
    tmp_path: Path, config: Path
) -> None:
    """SIGTERM while the server performs an effect: the proxy records the outcome before
    it stops, so a restarted client gets the recorded result, with no halt."""
    require_framework("mcp", "mcp")
    import signal
    import time

    import anyio
    import mcp.types as types
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    ledger, log = tmp_path / "ledger.db", EffectLog(tmp_path / "effects.jsonl")
    server = [sys.executable, "-m", "tests.integration_agents.mcp_server",
              "--effects", str(log.path), "--delay", "1.5"]  # fmt: skip
    proxy = StdioServerParameters(
        command=sys.executable,
        args=["-m", "oncelog", "mcp-proxy", "--db", str(ledger), "--config", str(config),
              "--run-id", "ticket-7", "--", *server],
        env=dict(os.environ), cwd=ROOT,
    )  # fmt: skip

    def in_flight() -> bool:
        with oncelog.open(str(ledger)) as opened:
            try:
                steps = opened.steps("ticket-7")
            except oncelog.UnknownRun:
                return False
        return [s.state for s in steps] == [StepState.IN_FLIGHT]

    async def terminate_mid_call() -> None:
        deadline = time.monotonic() + 60
        while not await anyio.to_thread.run_sync(in_flight):
            assert time.monotonic() < deadline, "the email never started"
            await anyio.sleep(0.05)
        pid = _proxy_pid(ledger)
        assert pid is not None
        os.kill(pid, signal.SIGTERM)

    async def work() -> list[types.CallToolResult]:
        async with stdio_client(proxy) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(terminate_mid_call)
                sent = await session.call_tool("send_email", {"customer": "cus_eve"})
            later = await session.call_tool("delete_account", {"customer": "cus_eve"})
            return [sent, later]

    sent, later = anyio.run(work)
    assert not sent.is_error, sent  # the call in progress ended, and was answered
    assert later.is_error
    assert "Draining" in str(later.content)
    with oncelog.open(str(ledger)) as opened:
        steps = opened.steps("ticket-7")
    assert [(s.step_id, s.state) for s in steps] == [("send_email#1", StepState.DONE)]
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1}
