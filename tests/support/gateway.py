"""``oncelog gateway`` and its counting upstream as real processes, and an MCP client of
the ``mcp`` package that calls through it with a token, a run and a call id.

    with counting_upstream(tmp_path, dedupe=True) as upstream, \\
            running_gateway(tmp_path, upstream, ledger_url) as gateway:
        result = anyio.run(call, gateway, "refund", {"order_id": 1, "amount": 5}, "r-1", "c-1")
        assert upstream.performed() == 1
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from ..integration_agents.processes import require_framework
from .launch import environment, python

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "bot-token-0123456789abcdef"
OTHER_TOKEN = "other-token-0123456789abcdef"
OPS_TOKEN = "ops-token-0123456789abcdef"
START_SECONDS = 60.0
TOOLS: dict[str, Any] = {
    "refund": {"kind": "payment", "once_per": ["order_id"], "dedupe_window": 86400},
    "send_email": "create",
    "lookup": "read",
    "delete_account": "destructive",
}


def upstream_fixture(*, dedupe: bool = False, name: str = "up") -> Any:
    """A pytest fixture of a counting upstream; ``dedupe``: one that performs a key once,
    as a provider within its window does."""

    @pytest.fixture
    def fixture(tmp_path: Path) -> Iterator[Upstream]:
        require_framework("mcp", "gateway")
        with counting_upstream(tmp_path, dedupe=dedupe, name=name) as running:
            yield running

    return fixture


def sync_call(url: str, tool: str, arguments: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """``call`` from synchronous test code."""
    return anyio.run(functools.partial(call, url, tool, arguments, *args, **kwargs))


def port_of(process: Process) -> int:
    return int(process.url.rsplit(":", 1)[1].split("/")[0])


def raw_post_head(process: Process, framing: bytes) -> socket.socket:
    """A connection that sent a POST's head (authorized, ``framing`` its body's length or
    chunking header) and no body yet; the caller closes it."""
    sock = socket.create_connection(("127.0.0.1", port_of(process)), timeout=30)
    sock.sendall(
        b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
        + b"\r\nContent-Type: application/json\r\n" + framing + b"\r\n\r\n"
    )  # fmt: skip
    return sock


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Process:
    process: subprocess.Popen[str]
    url: str

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=30)  # closes its pipe too


@dataclass
class Upstream(Process):
    count_file: Path = field(default=Path())
    requests_file: Path = field(default=Path())

    def performed(self, tool: str | None = None) -> int:
        """How many calls the upstream performed (of ``tool``), from its own file."""
        return len([e for e in _lines(self.count_file) if tool in (None, e["tool"])])

    def received(self, tool: str | None = None) -> list[dict[str, Any]]:
        return [e for e in _lines(self.requests_file) if tool in (None, e["tool"])]


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _started(argv: list[str], env: Mapping[str, str], banner: str, **popen: Any) -> Process:
    """The process once it printed ``banner``; its stderr goes to a file beside its
    config (a pipe nobody reads would stop it once full)."""
    log = Path(env.get("GATEWAY_TEST_LOG", os.devnull))
    with log.open("a") as err:
        process = subprocess.Popen(
            argv, env=dict(env), cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
            **popen,
        )  # fmt: skip
    assert process.stdout is not None
    import select

    ready, _, _ = select.select([process.stdout], [], [], START_SECONDS)
    line = process.stdout.readline() if ready else ""
    if banner not in line:
        process.kill()
        process.communicate(timeout=30)
        shown = log.read_text()[-3000:] if log != Path(os.devnull) else ""
        raise AssertionError(f"{argv[2:4]} did not start ({line!r}): {shown}")
    return Process(process, line.split(" on ", 1)[1].strip())


@contextmanager
def counting_upstream(
    root: Path, *, dedupe: bool = False, name: str = "up", port: int | None = None,
    delay: float = 0.0,
) -> Iterator[Upstream]:  # fmt: skip
    """A counting upstream over HTTP; one started again with the ``name`` and ``port`` of
    one killed is that upstream restarted: it keeps counting in the same files."""
    count, requests = root / f"{name}-count.jsonl", root / f"{name}-requests.jsonl"
    argv = python("-m", "tests.support.mcp_counting_upstream", "--http", str(port or free_port()),
                  "--count-file", count, "--requests", requests, "--delay", str(delay))  # fmt: skip
    env = environment(GATEWAY_TEST_LOG=str(root / f"{name}.log"))
    started = _started(argv + (["--dedupe"] if dedupe else []), env,
                       "mcp_counting_upstream listening")  # fmt: skip
    upstream = Upstream(started.process, started.url, count, requests)
    try:
        yield upstream
    finally:
        upstream.kill()


def gateway_config(root: Path, upstream: Upstream, **settings: Any) -> Path:
    config = {
        "tools": TOOLS,
        "upstreams": {"shop": {"url": upstream.url}},
        "clients": {
            "bot": {"token_env": "GATEWAY_TEST_TOKEN", "runs": ["ticket-*"], "tools": ["*"]},
            "reader": {"token_env": "GATEWAY_OTHER_TOKEN", "runs": ["*"], "tools": ["lookup"]},
            "ops": {
                "token_sha256": hashlib.sha256(OPS_TOKEN.encode()).hexdigest(),
                "runs": ["*"],
                "tools": ["*"],
            },
        },
        "console_url": "http://console.test",
        "lease_wait": 30,
        **settings,
    }
    path = root / "gateway.json"
    path.write_text(json.dumps(config))
    return path


def gateway_env(
    config: Path, crash_at: str | None = None, extra_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a gateway process with ``config``: its clients' tokens, the link
    secret, its log beside the config."""
    return environment(
        crash_at, PYTHONPATH=str(ROOT / "src"), GATEWAY_TEST_TOKEN=TOKEN,
        GATEWAY_OTHER_TOKEN=OTHER_TOKEN, ONCELOG_LINK_SECRET="gateway-test-link-secret-0123456789",
        GATEWAY_TEST_LOG=str(config.parent / "gateway.log"),
        **(extra_env or {}),
    )  # fmt: skip


def gateway_argv(config: Path, ledger_url: str) -> list[str]:
    return python("-m", "oncelog", "gateway", "--config", config, "--listen",
                  f"127.0.0.1:{free_port()}", "--ledger", ledger_url)  # fmt: skip


def start_gateway(
    config: Path, ledger_url: str, *, crash_at: str | None = None,
    extra_env: Mapping[str, str] | None = None, pass_fds: tuple[int, ...] = (),
) -> Process:  # fmt: skip
    env = gateway_env(config, crash_at, extra_env)
    return _started(gateway_argv(config, ledger_url), env, "oncelog gateway listening",
                    pass_fds=pass_fds)  # fmt: skip


@contextmanager
def running_gateway(config: Path, ledger_url: str, **options: Any) -> Iterator[Process]:
    gateway = start_gateway(config, ledger_url, **options)
    try:
        yield gateway
    finally:
        gateway.kill()


async def call(
    url: str, tool: str, arguments: dict[str, Any], run: str | None = None,
    call_id: str | None = None, *, token: str = TOKEN, request_state: str | None = None,
    input_responses: dict[str, Any] | None = None, headers: Mapping[str, str] | None = None,
    listed_first: bool = False,
) -> Any:  # fmt: skip
    """One ``tools/call`` by a fresh MCP client (a new connection, a new request id): the
    ``CallToolResult`` or the ``InputRequiredResult``. The client checks a result against
    the tool's output schema, listing the tools after the answer when it has not yet:
    ``listed_first`` lists them before the call, so that nothing is asked after it (of a
    gateway that stops listening once the call is answered)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    sent = {"Authorization": f"Bearer {token}", **(headers or {})}
    meta: dict[str, Any] = {}
    if run is not None:
        meta["io.oncelog/run-id"] = run
    if call_id is not None:
        meta["io.oncelog/call-id"] = call_id
    http = create_mcp_http_client(headers=sent)
    try:
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            if listed_first:
                await client.session.list_tools()
            return await client.session.call_tool(
                tool, arguments, meta=meta or None, request_state=request_state,  # type: ignore[arg-type]
                input_responses=input_responses, allow_input_required=True,
            )  # fmt: skip
    except Exception as exc:  # the client's task group wraps what it raised in a group
        raise _leaf(exc) from None


def _leaf(error: BaseException) -> BaseException:
    while isinstance(getattr(error, "exceptions", None), tuple):
        error = error.exceptions[0]  # type: ignore[attr-defined]
    return error


async def list_tools(url: str, token: str = TOKEN) -> list[str]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        return [tool.name for tool in (await client.list_tools()).tools]


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def kill_pid(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
