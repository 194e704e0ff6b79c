"""A TypeScript agent (the official MCP SDK, ``@modelcontextprotocol/client``, protocol
2026-07-28 over Streamable HTTP) calling tools through ``oncelog gateway``: each call is
performed once at the upstream, counted there (its count file), never from the ledger.

Real processes: the counting upstream (``tests/support/mcp_counting_upstream.py``), the
gateway (``python -m oncelog gateway``), and Node running ``tests/gateway_clients/ts/``
installed by ``npm ci`` from its lock. A gateway dies by SIGKILL at a named crash point
while the upstream is performing the call; the TypeScript client re-issues the call under
a new request id, as the specification says, to a restarted gateway or to another replica.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import require
from .support.announced_process import Announced, free_port
from .support.launch import python
from .support.postgres import POSTGRES_REASON, fresh_schema, postgres_is_up
from .support.ts_clients import NODE_REASON, NodeClient, installed, node_is_usable, outcome

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

TOKEN_ENV = "ONCELOG_TS_TEST_TOKEN"
TOKEN = "ts-agent-token-7f3a9c1e5b"
GATEWAY_READY = "oncelog gateway listening on "
UPSTREAM_READY = "mcp_counting_upstream listening on "
REFUND = {"order_id": 42, "amount": 1250}


@pytest.fixture(scope="module")
def ts_folder() -> Path:
    require(node_is_usable(), NODE_REASON)
    return installed()


class Upstream:
    def __init__(self, folder: Path, *flags: str) -> None:
        self.count_file = folder / "performed.jsonl"
        self.count_file.touch()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        argv = python("-m", "tests.support.mcp_counting_upstream", "--http", str(port),
                      "--count-file", str(self.count_file), *flags)  # fmt: skip
        self.process = Announced(argv, UPSTREAM_READY)

    def performed(self, tool: str | None = None) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.count_file.read_text().splitlines()]
        return [line for line in lines if tool is None or line["tool"] == tool]


class Gateways:
    """Gateway processes on one config and one ledger; each on its own port, or on the
    port of one it replaces."""

    def __init__(self, folder: Path, ledger: str, upstream: Upstream) -> None:
        self.ledger = ledger
        self.config = folder / "gateway.json"
        self.config.write_text(json.dumps(gateway_config(upstream.url)))
        self.started: list[Announced] = []

    def start(self, port: int | None = None, crash_at: str | None = None) -> tuple[Announced, str]:
        port = port or free_port()
        argv = python("-m", "oncelog", "gateway", "--config", str(self.config),
                      "--listen", f"127.0.0.1:{port}", "--ledger", self.ledger)  # fmt: skip
        gateway = Announced(argv, GATEWAY_READY, crash_at, **{TOKEN_ENV: TOKEN})
        self.started.append(gateway)
        return gateway, f"http://127.0.0.1:{port}/mcp"

    def stop_all(self) -> None:
        for gateway in self.started:
            gateway.kill()


def gateway_config(upstream_url: str) -> dict[str, Any]:
    return {
        "upstreams": {"shop": {"url": upstream_url}},
        "tools": {
            "refund": {"kind": "payment", "dedupe_window": 86400},
            "send_email": "create",
            "lookup": "read",
            "delete_account": {"kind": "destructive"},
        },
        "clients": {"agent": {"token_env": TOKEN_ENV, "runs": ["ticket-*"], "tools": ["*"]}},
    }


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[Upstream]:
    # --dedupe: a provider that performs a key once (as Stripe does within its window), so
    # that an attempt the gateway sends again after its own death, with the same key, is
    # answered there instead of performed twice.
    running = Upstream(tmp_path, "--dedupe")
    yield running
    running.process.kill()


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.db")


@pytest.fixture
def gateways(tmp_path: Path, ledger_url: str, upstream: Upstream) -> Iterator[Gateways]:
    started = Gateways(tmp_path, ledger_url, upstream)
    yield started
    started.stop_all()


@pytest.fixture
def ts_call(ts_folder: Path) -> Iterator[Callable[..., NodeClient]]:
    clients: list[NodeClient] = []

    def call(urls: list[str], tool: str, arguments: dict[str, Any], **spec: Any) -> NodeClient:
        spec = {"urls": urls, "token": TOKEN, "tool": tool, "arguments": arguments, **spec}
        client = NodeClient(ts_folder, "call.mjs", spec)
        clients.append(client)
        return client

    yield call
    for client in clients:
        client.kill()


def text_of(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


def test_a_call_is_performed_once_and_its_repeat_answered_from_the_ledger(
    gateways: Gateways, upstream: Upstream, ts_call: Callable[..., NodeClient]
) -> None:
    _, url = gateways.start()
    first = outcome(ts_call([url], "refund", REFUND, run="ticket-1", callId="call_a").finish())
    assert first["event"] == "result", first
    assert not first["result"].get("isError"), first
    again = outcome(ts_call([url], "refund", REFUND, run="ticket-1", callId="call_a").finish())
    assert text_of(again["result"]) == text_of(first["result"])
    assert len(upstream.performed("refund")) == 1
    [done] = upstream.performed("refund")
    assert done["key"], "the idempotency key reached the upstream in _meta"


@pytest.mark.parametrize("point", ["after_intent_commit", "after_call", "before_outcome_commit"])
def test_a_gateway_killed_mid_call_and_restarted_performs_the_reissued_call_once(
    gateways: Gateways, upstream: Upstream, ts_call: Callable[..., NodeClient], point: str
) -> None:
    port = free_port()
    dying, url = gateways.start(port, crash_at=point)
    client = ts_call([url], "refund", REFUND, run="ticket-2", callId="call_b", retryFor=60)
    client.wait_for("error")  # the stream broke: the gateway died mid-call
    assert dying.wait_dead() == -9
    gateways.start(port)  # the same address, a new process, the same ledger
    answer = outcome(client.finish())
    assert answer["event"] == "result", client.events
    attempts = [e for e in client.events if e["event"] == "attempt"]
    assert len(attempts) >= 2  # re-issued as a new request (a new id, a new connection)
    assert len(upstream.performed("refund")) == 1, answer


def test_two_replicas_on_postgres_a_call_reissued_to_the_other_after_a_kill_is_performed_once(
    tmp_path: Path, upstream: Upstream, ts_call: Callable[..., NodeClient]
) -> None:
    require(postgres_is_up(), POSTGRES_REASON)
    with fresh_schema() as pg_url:
        replicas = Gateways(tmp_path, pg_url, upstream)
        try:
            first, first_url = replicas.start(crash_at="after_call")
            _, second_url = replicas.start()
            client = ts_call([first_url, second_url], "refund", REFUND, run="ticket-3",
                             callId="call_c", retryFor=60)  # fmt: skip
            assert first.wait_dead() == -9
            answer = outcome(client.finish())
            assert answer["event"] == "result", client.events
            assert {e["url"] for e in client.events if e["event"] == "attempt"} == {
                first_url,
                second_url,
            }
            assert len(upstream.performed("refund")) == 1
        finally:
            replicas.stop_all()


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_a_client_without_a_good_token_is_refused_and_nothing_is_performed(
    gateways: Gateways, upstream: Upstream, ts_call: Callable[..., NodeClient], token: str | None
) -> None:
    _, url = gateways.start()
    events = ts_call([url], "refund", REFUND, run="ticket-4", callId="call_d", token=token).finish()
    refused = outcome(events)
    assert refused["event"] == "error", events
    assert refused["name"] == "UnauthorizedError", refused  # HTTP 401
    assert upstream.performed() == []
