"""Who may call ``oncelog gateway``, and what bad input gets: strangers without a token or
with a wrong one, a client reaching past its runs and tools, a foreign Origin, oversized,
slow, batched, malformed or unknown requests each get the protocol's error in bounded
time, and nothing reaches the upstream process (which counts) or the ledger."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import oncelog

from .support.gateway import (
    OTHER_TOKEN,
    TOKEN,
    Process,
    Upstream,
    gateway_config,
    list_tools,
    port_of,
    raw_post_head,
    running_gateway,
    sync_call,
    upstream_fixture,
)

REFUND = {"order_id": 7, "amount": 500}
LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()


upstream = upstream_fixture()


@pytest.fixture
def gateway(tmp_path: Path, upstream: Upstream) -> Iterator[Process]:
    config = gateway_config(
        tmp_path, upstream, allowed_origins=["https://agents.example"], max_body_bytes=4096,
        body_seconds=1,
    )  # fmt: skip
    with running_gateway(config, str(tmp_path / "l.db")) as gw:
        yield gw


@pytest.fixture(autouse=True)
def nothing_recorded(tmp_path: Path, upstream: Upstream) -> Iterator[None]:
    yield
    assert upstream.received() == []
    assert upstream.performed() == 0
    with oncelog.open(str(tmp_path / "l.db")) as ledger:
        assert ledger.runs() == []


def post(
    gateway: Process, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port_of(gateway), timeout=30)
    sent = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", **(headers or {})}  # fmt: skip
    try:
        connection.request("POST", "/mcp", body=body, headers=sent)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def test_each_client_sees_only_its_tools(gateway: Process) -> None:
    assert sorted(anyio.run(list_tools, gateway.url)) == [
        "delete_account", "lookup", "refund", "send_email",
    ]  # fmt: skip
    assert anyio.run(list_tools, gateway.url, OTHER_TOKEN) == ["lookup"]


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token-0123456789", f"Basic {TOKEN}",
                                           f"Bearer {TOKEN}x", "Bearer "])  # fmt: skip
def test_strangers_get_401(gateway: Process, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    connection = http.client.HTTPConnection("127.0.0.1", port_of(gateway), timeout=30)
    params = {"name": "refund", "arguments": REFUND}
    call_body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    body = call_body.encode()
    connection.putrequest("POST", "/mcp")
    for name, value in {"Content-Type": "application/json", **headers}.items():
        connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    assert response.status == 401
    assert response.getheader("WWW-Authenticate", "").startswith("Bearer")
    connection.close()


def test_a_client_reaches_only_its_runs_and_tools(gateway: Process) -> None:
    with pytest.raises(Exception, match="Unknown tool: refund"):
        sync_call(gateway.url, "refund", REFUND, "ticket-1", "c", token=OTHER_TOKEN)
    with pytest.raises(Exception, match="may not call in run 'other-1'"):
        sync_call(gateway.url, "refund", REFUND, "other-1", "c")
    with pytest.raises(Exception, match="Unknown tool: no_such_tool"):
        sync_call(gateway.url, "no_such_tool", {}, "ticket-1", "c")


def test_a_call_without_a_run_or_with_unknown_meta_is_refused(gateway: Process) -> None:
    with pytest.raises(Exception, match="no run id"):
        sync_call(gateway.url, "refund", REFUND)
    with pytest.raises(Exception, match="unknown _meta keys"):
        anyio.run(_misspelt, gateway.url)


async def _misspelt(url: str) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            meta: Any = {"io.oncelog/run_id": "ticket-1"}  # misspelt: never default_run
            return await client.session.call_tool("refund", REFUND, meta=meta)
    except Exception as exc:
        while isinstance(getattr(exc, "exceptions", None), tuple):
            exc = exc.exceptions[0]  # type: ignore[attr-defined]
        raise exc from None


def test_a_foreign_origin_gets_403_and_an_allowed_one_passes(gateway: Process) -> None:
    assert post(gateway, LIST, {"Origin": "http://evil.example"})[0] == 403
    status, answer = post(gateway, LIST, {"Origin": "https://agents.example"})
    assert status == 200
    assert "tools" in answer["result"]


def test_bad_input_gets_the_protocols_errors(gateway: Process) -> None:
    status, answer = post(gateway, b"{not json")
    assert (status, answer["error"]["code"]) == (400, -32700)
    status, answer = post(gateway, b"[" + LIST + b"," + LIST + b"]")
    assert (status, answer["error"]["code"]) == (400, -32600)
    unknown = {"jsonrpc": "2.0", "id": 2, "method": "admin/drop", "params": {}}
    assert post(gateway, json.dumps(unknown).encode())[1]["error"]["code"] == -32601
    status, _ = post(gateway, b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "x": "'
                     + b"a" * 10_000 + b'"}')  # fmt: skip
    assert status == 413


def test_an_oversized_body_without_a_length_is_cut_at_the_limit(gateway: Process) -> None:
    with raw_post_head(gateway, b"Transfer-Encoding: chunked") as sock:
        for _ in range(64):  # 64 KiB offered, 4 KiB allowed: refused once past it
            try:
                sock.sendall(b"400\r\n" + b"a" * 1024 + b"\r\n")
            except OSError:
                break
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413")


def test_a_slow_client_is_cut_off(gateway: Process) -> None:
    with raw_post_head(gateway, b"Content-Length: 100") as sock:
        sock.sendall(b'{"jsonrpc"')  # 10 of the 100 bytes, and no more
        answer = sock.recv(4096)  # the socket's timeout is the hang bound
    assert answer.startswith(b"HTTP/1.1 408"), answer
