"""What the gateway checks of an HTTP request before any MCP is read: its Origin, its
bearer token, its body (bounded in bytes and in time, one JSON-RPC message, not a batch).

A request that fails answers at once with the HTTP status and a JSON-RPC error body, and
reaches neither the MCP server nor the ledger:

- an ``Origin`` header that is not in ``allowed_origins``: 403 (the MCP specification's
  rule against DNS rebinding; a client that sends no Origin, not a browser, passes);
- no bearer token, or one no client has: 401 with ``WWW-Authenticate: Bearer``. Each
  presented token's SHA-256 is compared with every client's, each in constant time
  (``hmac.compare_digest``), so the time taken says nothing of which came close;
- a body longer than ``max_body_bytes`` (by its ``Content-Length`` or as it arrives): 413;
  a body that does not arrive within ``body_seconds``: 408 (a slow client holds no slot
  for long); a JSON array (a batch, which the current specification removed): 400.

The client a token names, and the request's ``Oncelog-Run-Id`` and ``Oncelog-Call-Id``
headers, are handed to the MCP handler through ``CALLER``.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ._gateway_config import ClientRule

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

INVALID_REQUEST = -32600


@dataclass(frozen=True)
class Caller:
    """Who sent the request being handled, and the run and call its headers name."""

    client: ClientRule
    run_header: str | None
    call_header: str | None


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "gateway_caller", default=None
)


def client_of(authorization: str | None, clients: Sequence[ClientRule]) -> ClientRule | None:
    """The client whose token the ``Authorization`` header bears, if any."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    digest = hashlib.sha256(token.strip().encode()).digest()
    found = None
    for client in clients:  # every one compared: no early exit tells which was near
        if hmac.compare_digest(digest, client.token_sha256):
            found = client
    return found


class Guard:
    """The ASGI application in front of the MCP one."""

    def __init__(
        self, app: App, clients: Sequence[ClientRule], origins: frozenset[str], max_body: int,
        body_seconds: float,
    ) -> None:  # fmt: skip
        self.app = app
        self.body_seconds = body_seconds
        self.clients = clients
        self.origins = origins
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the MCP app's session manager
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            await _refuse(send, 403, f"Origin {origin!r} is not allowed")
            return
        client = client_of(headers.get("authorization"), self.clients)
        if client is None:
            await _refuse(send, 401, "a bearer token of a client of this gateway is needed",
                          [(b"www-authenticate", b'Bearer realm="oncelog-gateway"')])  # fmt: skip
            return
        body = b""
        if scope["method"] == "POST":
            read = await self._body(headers, receive, send)
            if read is None:
                return
            body = read
        token = CALLER.set(Caller(client, headers.get("oncelog-run-id"),
                                  headers.get("oncelog-call-id")))  # fmt: skip
        try:
            await self.app(scope, _replay(body, receive), send)
        finally:
            CALLER.reset(token)

    async def _body(self, headers: dict[str, str], receive: Receive, send: Send) -> bytes | None:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            await _refuse(send, 413, f"the body is over {self.max_body} bytes")
            return None
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(self.body_seconds) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    await _refuse(send, 413, f"the body is over {self.max_body} bytes")
                    return None
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        if deadline.cancel_called:
            await _refuse(send, 408, f"the body did not arrive within {self.body_seconds:g} s")
            return None
        body = b"".join(chunks)
        if body.lstrip()[:1] == b"[":
            await _refuse(send, 400, "JSON-RPC batches are not accepted: one message per request")
            return None
        return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read once, handed on as if it arrived now; then the connection's own."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def _refuse(
    send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers += extra or []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
