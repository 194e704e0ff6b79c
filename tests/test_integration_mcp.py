"""``oncelog mcp-proxy`` for real: an MCP client (the ``mcp`` package's ClientSession) talks
to the proxy, which starts a low-level MCP server whose tools write to an effect log.

The proxy is SIGKILLed right after an effect's outcome is recorded; the restarted client
calls its tools again from the top and gets the recorded results; the destructive tool
answers with a tool error until a person approves it with ``oncelog approve``. Each effect
happens once, by the effect log's own records."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import ROOT, require_framework, run_agent
from .support import oncelog_cli
from .support.launch import PYTHON, environment, python

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
    assert "oncelog approve ticket-5 'delete_account#1'" in waiting["text"]
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
        PYTHON,
        "-m",
        "tests.integration_agents.mcp_server",
        "--effects",
        str(log.path),
    ]
    proxy = StdioServerParameters(
        command=PYTHON,
        args=["-m", "oncelog", "mcp-proxy", "--db", str(ledger), "--config", str(config),
              "--", *server],
        env=dict(os.environ), cwd=ROOT,
    )  # fmt: skip
    meta = cast(types.RequestParamsMeta, {"io.oncelog/run-id": "ticket-6"})

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
    server = [PYTHON, "-m", "tests.integration_agents.mcp_server",
              "--effects", str(log.path), "--delay", "1.5"]  # fmt: skip
    proxy = StdioServerParameters(
        command=PYTHON,
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


def test_a_server_that_exited_is_not_sent_calls_and_the_next_proxy_sends_them(
    tmp_path: Path, config: Path
) -> None:
    """The server the proxy started is SIGKILLed between two calls. The proxy sees its
    output end, and the next call is refused, unsent and recorded not performed (before,
    it went into the closed pipes and was left in doubt, for a person); a recorded call is
    still answered. A client that starts the proxy again resumes the run: the refused call
    is performed once."""
    require_framework("mcp", "mcp")
    import signal
    import time

    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    ledger, log = tmp_path / "ledger.db", EffectLog(tmp_path / "effects.jsonl")
    stderr = tmp_path / "proxy.log"

    async def server_killed_after_one_call() -> list[Any]:
        params = proxy_params(tmp_path, config)
        with stderr.open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                sent = await client.call_tool("send_email", {"customer": "cus_ada"})
                proxy = _proxy_pid(ledger)
                assert proxy is not None
                [server] = _children(proxy)
                os.kill(server, signal.SIGKILL)
                deadline = time.monotonic() + 60
                while "the MCP server exited" not in stderr.read_text():
                    assert time.monotonic() < deadline, stderr.read_text()[-2000:]
                    await anyio.sleep(0.05)
                refused = await client.call_tool("send_email", {"customer": "cus_ada"})
                return [sent, refused]

    sent, refused = anyio.run(server_killed_after_one_call)
    assert not sent.is_error, sent
    assert refused.is_error
    assert "has exited; nothing was sent" in text_of(refused), text_of(refused)
    with oncelog.open(str(ledger)) as opened:
        states = [(s.step_id, s.state) for s in opened.steps("ticket-8")]
    assert states == [("send_email#1", StepState.DONE), ("send_email#2", StepState.NOT_DONE)]
    again = session(tmp_path, config, ["send_email", "send_email"])
    assert again[1].content == sent.content  # send_email#1, replayed
    assert not again[2].is_error, again[2]
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 2}


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == str(pid):
            found.append(int(proc.name))
    return found


def proxy_params(
    tmp_path: Path, config: Path, crash_at: str | None = None, server_options: tuple[str, ...] = ()
) -> Any:
    from mcp import StdioServerParameters

    server = server_args(tmp_path, *server_options)
    env = environment(crash_at)
    return StdioServerParameters(
        command=PYTHON,
        args=["-m", "oncelog", "mcp-proxy", "--db", str(tmp_path / "ledger.db"),
              "--config", str(config), "--run-id", "ticket-8", "--", *server],
        env=env, cwd=ROOT,
    )  # fmt: skip


def session(
    tmp_path: Path,
    config: Path,
    calls: list[str],
    crash_at: str | None = None,
    server_options: tuple[str, ...] = (),
) -> list[Any]:
    """One client session through a fresh proxy: each call's result, or the error that
    ended the session (the proxy killed under it)."""
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async def work() -> list[Any]:
        answers: list[Any] = []
        with anyio.fail_after(60):
            try:
                params = proxy_params(tmp_path, config, crash_at, server_options)
                async with (
                    stdio_client(params) as (read, write),
                    ClientSession(read, write) as client,
                ):
                    await client.initialize()
                    answers.append([t.name for t in (await client.list_tools()).tools])
                    for tool in calls:
                        answers.append(await client.call_tool(tool, {"customer": "cus_ada"}))
            except Exception as exc:  # the proxy died mid-call
                answers.append(exc)
        return answers

    return anyio.run(work)


def text_of(result: Any) -> str:
    import mcp.types as types

    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_a_person_resolves_an_mcp_call_with_text_and_corrects_it(tmp_path: Path) -> None:
    require_framework("mcp", "mcp")
    config = tmp_path / "tools.json"
    config.write_text(json.dumps({"tools": {"send_email": "create", "refund": "payment"}}))
    db = str(tmp_path / "ledger.db")

    listed, died = session(tmp_path, config, ["send_email"], crash_at="after_call@send_email#1")
    assert listed == ["send_email", "refund"]  # lookup and delete_account: no kind declared
    assert isinstance(died, Exception), died
    _, in_doubt = session(tmp_path, config, ["send_email"])
    assert in_doubt.is_error
    said = text_of(in_doubt)
    assert "AmbiguousOutcome in run 'ticket-8'" in said
    assert "oncelog resolve ticket-8 'send_email#1' done --text" in said

    oncelog_cli(db, "resolve", "ticket-8", "send_email#1", "done", "--text", "sent", "--by", "al")
    fixed = oncelog_cli(
        db, "resolve", "ticket-8", "send_email#1", "done", "--by", "bo", "--correct",
        "--text", "sent as fx_1",
    )  # fmt: skip
    assert "done (corrected)" in fixed

    _, email, refund = session(tmp_path, config, ["send_email", "refund"])
    assert (email.is_error, text_of(email)) == (False, "sent as fx_1")
    assert refund.structured_content == {"refund_id": refund.structured_content["refund_id"]}
    assert Counter(e["tool"] for e in EffectLog(tmp_path / "effects.jsonl").entries()) == {
        "send_email": 1, "refund": 1,
    }  # fmt: skip
    late = correct_cli(db, "send_email#1", "--text", "too late")
    assert "a later step exists, or it completed" in late.stderr
    with oncelog.open(db) as ledger:
        events = [e.event for e in ledger.journal("ticket-8") if e.seq == 0]
    assert events[-2:] == ["resolved", "corrected"]


@pytest.mark.parametrize(("tool", "finds"), [("send_email", "bare"), ("refund", "result")])
def test_a_probe_in_the_proxy_s_config_settles_a_call_left_in_doubt(
    tmp_path: Path, tool: str, finds: str
) -> None:
    """The proxy is killed after its server acted; the next session's call is in doubt,
    and the probe its config declares (the server's ``find_effect``, asked with the key)
    finds it: answered with the call's own result where the probe gives it (a refund, whose
    output schema the client checks), else with the probe's; nothing sent again."""
    require_framework("mcp", "mcp")
    config = tmp_path / "tools.json"
    probes = {tool: {"tool": "find_effect", "key_argument": "key"}}
    config.write_text(json.dumps({"tools": {tool: "create"}, "probes": probes}))
    finder = ("--find-tool", finds)
    _, died = session(tmp_path, config, [tool], f"after_call@{tool}#1", finder)
    assert isinstance(died, Exception), died
    _, settled = session(tmp_path, config, [tool], server_options=finder)
    assert not settled.is_error, text_of(settled)
    [performed] = EffectLog(tmp_path / "effects.jsonl").entries()
    assert performed["tool"] == tool
    if finds == "result":
        assert settled.structured_content == {"refund_id": performed["receipt"]["id"]}
    else:
        assert json.loads(text_of(settled))["found"] is True
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        [step] = ledger.steps("ticket-8")
    assert (step.step_id, step.state) == (f"{tool}#1", StepState.DONE)


def test_a_probe_without_a_result_that_fits_the_output_schema_leaves_it_to_a_person(
    tmp_path: Path,
) -> None:
    """refund declares an output schema; its probe finds the refund but gives no result of
    that shape: recorded, the client would refuse it forever, so a person gives it."""
    require_framework("mcp", "mcp")
    config = tmp_path / "tools.json"
    probes = {"refund": {"tool": "find_effect", "key_argument": "key"}}
    config.write_text(json.dumps({"tools": {"refund": "create"}, "probes": probes}))
    finder = ("--find-tool", "bare")
    session(tmp_path, config, ["refund"], "after_call@refund#1", finder)
    _, in_doubt = session(tmp_path, config, ["refund"], server_options=finder)
    assert in_doubt.is_error
    assert "AmbiguousOutcome" in text_of(in_doubt)
    assert len(EffectLog(tmp_path / "effects.jsonl").entries()) == 1


def test_a_probe_of_a_tool_the_server_does_not_list_stops_the_proxy(tmp_path: Path) -> None:
    """Found when the server lists its tools (no ``--find-tool``): a usage error saying
    what, not a traceback from the MCP client's task groups."""
    require_framework("mcp", "mcp")
    config = tmp_path / "tools.json"
    probes = {"send_email": {"tool": "find_effect"}}
    config.write_text(json.dumps({"tools": {"send_email": "create"}, "probes": probes}))
    argv = python("-m", "oncelog", "mcp-proxy", "--db", tmp_path / "ledger.db", "--config",
                  config, "--", *server_args(tmp_path))  # fmt: skip
    refused = subprocess.run(
        argv, input="", capture_output=True, text=True, timeout=60, cwd=ROOT, env=environment()
    )  # fmt: skip
    assert refused.returncode == 2, refused
    assert "the probe of 'send_email' is the tool 'find_effect'" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert EffectLog(tmp_path / "effects.jsonl").entries() == []


def correct_cli(db: str, step: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = python("-m", "oncelog", "resolve", "ticket-8", step, "done", "--by", "cy")
    argv += ["--correct", *args, "--db", db]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 6, refused  # a conflict with what is recorded
    return refused


def test_an_mcp_result_must_fit_the_tools_output_schema(tmp_path: Path) -> None:
    require_framework("mcp", "mcp")
    config = tmp_path / "tools.json"
    config.write_text(json.dumps({"tools": {"refund": "payment"}}))
    db = str(tmp_path / "ledger.db")
    session(tmp_path, config, ["refund"], crash_at="after_call@refund#1")

    def resolve(*how: str) -> subprocess.CompletedProcess[str]:
        argv = python("-m", "oncelog", "resolve", "ticket-8", "refund#1", "done")
        argv += [*how, "--by", "al", "--db", db]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    plain = resolve("--text", "refunded")
    assert plain.returncode == 6  # the result disagrees with the recorded contract
    assert "declares an output schema: give its structured content as JSON" in plain.stderr
    wrong = resolve("--text", '{"refund_id": 7}')
    assert "$.refund_id: expected string, got int" in wrong.stderr
    bare = resolve("--result", json.dumps({"content": [{"type": "text", "text": "ok"}]}))
    assert 'give "structuredContent"' in bare.stderr
    with oncelog.open(db) as ledger:
        assert ledger.steps("ticket-8")[0].state is StepState.IN_FLIGHT  # nothing accepted

    assert resolve("--text", '{"refund_id": "re_1"}').returncode == 0
    _, refund = session(tmp_path, config, ["refund"])
    assert (refund.is_error, refund.structured_content) == (False, {"refund_id": "re_1"})
    assert text_of(refund) == '{"refund_id": "re_1"}'


def server_args(tmp_path: Path, *extra: str) -> list[str]:
    server = python("-m", "tests.integration_agents.mcp_server")
    return [*server, "--effects", str(tmp_path / "effects.jsonl"), *extra]


ANNOTATED = {
    "lookup": {"readOnlyHint": True},
    "send_email": {"destructiveHint": False},
    "refund": {"destructiveHint": False, "idempotentHint": True},
    "delete_account": {"title": "Delete"},  # says nothing: destructive, by the spec's defaults
}


def listed_kinds(tmp_path: Path, config: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """What ``oncelog mcp-proxy --list --json`` says of each tool of the annotated server."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(config))
    argv = python("-m", "oncelog", "mcp-proxy", "--config", str(path), "--list", "--json")
    argv += ["--", *server_args(tmp_path, "--annotations", json.dumps(ANNOTATED))]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, check=True, cwd=ROOT, env=environment()
    )
    rows = json.loads(done.stdout)
    return {r["tool"]: (r["kind"], r["source"], r["waits_for_a_person"]) for r in rows}


def test_a_trusted_servers_annotations_propose_kinds_and_the_config_wins(tmp_path: Path) -> None:
    require_framework("mcp", "mcp")
    trusted = {"tools": {"refund": "payment"}, "trust_annotations": True}
    assert listed_kinds(tmp_path, trusted) == {
        "lookup": ("read", "annotation", False),
        "send_email": ("create", "annotation", False),
        "delete_account": ("destructive", "annotation", True),
        "refund": ("payment", "config", False),  # its annotations say upsert: the config wins
    }
    # Without trust the same hints are never read: only the config and its default count.
    untrusted = {"tools": {"refund": "payment"}, "default_kind": "destructive"}
    assert listed_kinds(tmp_path, untrusted) == {
        "lookup": ("destructive", "default", True),
        "send_email": ("destructive", "default", True),
        "delete_account": ("destructive", "default", True),
        "refund": ("payment", "config", False),
    }
    assert listed_kinds(tmp_path, {"tools": {}})["send_email"] == (None, None, False)


def test_a_config_milder_than_the_annotations_wins_and_is_pointed_out(tmp_path: Path) -> None:
    """The config calls ``delete_account`` (annotated destructive) a ``read`` and ``refund``
    (annotated upsert) a ``payment``: the config wins both, and only the milder one is
    pointed out, whether the server is trusted or not (a warning never makes a tool milder)."""
    require_framework("mcp", "mcp")
    path = tmp_path / "tools.json"
    for trust in (True, False):
        path.write_text(json.dumps({
            "tools": {"delete_account": "read", "refund": "payment", "lookup": "read"},
            "trust_annotations": trust,
        }))  # fmt: skip
        argv = python("-m", "oncelog", "mcp-proxy", "--config", str(path), "--list")
        argv += ["--", *server_args(tmp_path, "--annotations", json.dumps(ANNOTATED))]
        as_json = subprocess.run(
            [*argv[: argv.index("--list") + 1], "--json", *argv[argv.index("--list") + 1 :]],
            capture_output=True, text=True, timeout=60, check=True, cwd=ROOT, env=environment(),
        )  # fmt: skip
        rows = {r["tool"]: (r["kind"], r["annotated"]) for r in json.loads(as_json.stdout)}
        assert rows["delete_account"] == ("read", "destructive")
        assert rows["refund"] == ("payment", None)  # stronger than its annotations: fine
        assert rows["lookup"] == ("read", None)
        text = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, check=True, cwd=ROOT,
            env=environment(),
        ).stdout  # fmt: skip
        line = next(row for row in text.splitlines() if row.startswith("delete_account"))
        assert "(its server says destructive)" in line
        assert "its server says" not in next(
            row for row in text.splitlines() if row.startswith("refund")
        )


def test_a_trusted_annotation_makes_a_tool_wait_for_a_person(tmp_path: Path) -> None:
    """The tool whose annotations say nothing of its effects is destructive: it is not
    called until a person approved it. The annotated ``create``, the proxy killed right
    after the server performed it, is not sent again. Counted at the server."""
    require_framework("mcp", "mcp")
    config = tmp_path / "tools.json"
    config.write_text(json.dumps({"trust_annotations": True}))
    server = ("--annotations", json.dumps(ANNOTATED))
    both = ["delete_account", "send_email"]

    listed, waits = session(tmp_path, config, ["delete_account"], None, server)
    assert listed == ["lookup", "send_email", "delete_account", "refund"]
    assert "oncelog approve ticket-8 'delete_account#1'" in text_of(waits)
    assert EffectLog(tmp_path / "effects.jsonl").entries() == []

    oncelog_cli(
        str(tmp_path / "ledger.db"), "approve", "ticket-8", "delete_account#1", "--by", "al"
    )
    _, deleted, died = session(tmp_path, config, both, "after_call@send_email#1", server)
    assert not deleted.is_error, deleted
    assert isinstance(died, Exception), died
    _, deleted_again, in_doubt = session(tmp_path, config, both, None, server)
    assert text_of(deleted_again) == text_of(deleted)  # recorded, not performed again
    assert "AmbiguousOutcome" in text_of(in_doubt)  # a create is never sent twice
    assert Counter(e["tool"] for e in EffectLog(tmp_path / "effects.jsonl").entries()) == {
        "delete_account": 1,
        "send_email": 1,
    }


def test_the_server_receives_one_idempotency_key_per_call_and_can_dedupe(tmp_path: Path) -> None:
    """The proxy dies after the server performed the email; the effect has a dedupe window,
    so the restarted proxy sends it again, under the same ``_meta`` key: the server, which
    dedupes by that key, performs it once. Both requests are counted at the server."""
    require_framework("mcp", "mcp")
    config = tmp_path / "tools.json"
    config.write_text(
        json.dumps({"tools": {"send_email": {"kind": "create", "dedupe_window": 3600}}})
    )
    requests = tmp_path / "requests.jsonl"
    server = ("--requests", str(requests), "--dedupe")

    _, died = session(tmp_path, config, ["send_email"], "after_call@send_email#1", server)
    assert isinstance(died, Exception), died
    _, sent = session(tmp_path, config, ["send_email"], None, server)
    assert not sent.is_error, sent

    received = [json.loads(line) for line in requests.read_text().splitlines()]
    keys = [r["meta"].get("io.oncelog/idempotency-key") for r in received]
    assert len(keys) == 2
    assert keys[0] is not None
    assert keys[0] == keys[1]
    assert all(set(r["meta"]) == {"io.oncelog/idempotency-key"} for r in received)
    effects = EffectLog(tmp_path / "effects.jsonl").entries()
    assert [(e["tool"], e["key"]) for e in effects] == [("send_email", keys[0])]


def test_a_misspelt_oncelog_meta_key_is_refused(tmp_path: Path, config: Path) -> None:
    """A client naming its run under the old or a misspelt key would otherwise have its
    call filed under --run-id: refused before the server is reached."""
    require_framework("mcp", "mcp")
    import anyio
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async def work() -> types.CallToolResult:
        async with (
            stdio_client(proxy_params(tmp_path, config)) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            meta = cast(types.RequestParamsMeta, {"oncelog/run_id": "ticket-9"})
            return await client.call_tool("send_email", {"customer": "cus_ada"}, meta=meta)

    refused = anyio.run(work)
    assert refused.is_error
    assert "unknown _meta keys ['oncelog/run_id']" in text_of(refused)
    assert EffectLog(tmp_path / "effects.jsonl").entries() == []


def test_json_goes_with_list() -> None:
    """Without --list the proxy speaks MCP on stdout: JSON there would break the client."""
    argv = python("-m", "oncelog", "mcp-proxy", "--json", "--", "true")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--json goes with --list" in done.stderr
