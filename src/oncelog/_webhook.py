"""POSTing to a webhook (an alert, a notice, a batch of the journal) without letting the
receiver hold, flood or redirect the sender, and without showing the secret its URL may
carry.

The whole delivery (connecting, sending, the answer's status line and headers) has one
deadline: a socket's timeout bounds each read alone, and a receiver that trickles a byte
every few seconds renews it for ever. Only the status is read, never the body, so a huge
answer costs nothing. A redirect is not followed (it would take the body elsewhere): a
3xx is a failed delivery. A webhook URL often carries its token (in the userinfo, the path
or the query): messages name only the scheme, host and port, and the userinfo is sent as
the request's basic credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._exceptions import ConfigurationError
from ._log import log

if TYPE_CHECKING:
    from http.client import HTTPConnection

DEADLINE = 5.0  # seconds for a whole alert's delivery; a slow receiver must not hold the run


def post_json(url: str, body: str, what: str) -> bool:
    """POST ``body`` to ``url`` as JSON; True if the receiver answered 2xx within
    ``DEADLINE`` seconds, else logged."""
    failure = deliver(url, body.encode(), {"Content-Type": "application/json"}, DEADLINE)
    if failure is not None:
        log.error("alert webhook %s failed: %s (%s)", redacted(url), failure, what)
    return failure is None


def deliver(url: str, body: bytes, headers: Mapping[str, str], deadline: float) -> str | None:
    """POST ``body`` to ``url`` with ``headers``, all of it within ``deadline`` seconds:
    None once the receiver answered 2xx, else why not (without the URL's secrets)."""
    # Imported here: http.client pulls in socket, email and ssl, a third of the import
    # time of the whole package, for agents that have no webhook.
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    secrets = (parts.username, parts.password, parts.path, parts.query, *headers.values())
    try:
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = kind(parts.hostname or "", parts.port, timeout=deadline)
    except ValueError as exc:  # a port that is not a number
        return _without(str(exc), secrets)
    cut = _Deadline(connection, deadline)
    try:
        connection.connect()
        cut.check()
        target = f"{parts.path or '/'}{'?' if parts.query else ''}{parts.query}"
        connection.request("POST", target, body, _headers(parts.username, parts.password, headers))
        status = connection.getresponse().status
        cut.check()  # cut short, headers end where the stream did: not an answer
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if cut.passed:
            return f"no answer within {deadline:g} s (timed out)"
        return _without(str(exc), secrets)  # an invalid URL or header is quoted in it
    finally:
        cut.cancel()
        connection.close()  # unread: whatever body followed the status is dropped
    if not 200 <= status < 300:
        return f"it answered {status}"
    return None


def redacted(url: str) -> str:
    """``url`` as shown: its scheme, host and port, without what may be a secret."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…"


def checked_url(url: str, setting: str) -> str:
    """``url`` if it is an http(s) URL with a host, else ``ConfigurationError`` naming the
    ``setting``: the URL itself is not repeated, it may carry a token."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        valid = False
    if not valid:
        raise ConfigurationError(
            f"{setting} must be an http(s) URL with a host, http://HOST/... or https://HOST/... "
            "(the value is not repeated here: it may carry a token)"
        )
    return url


def _without(text: str, secrets: tuple[str | None, ...]) -> str:
    for secret in secrets:
        if secret and len(secret) > 1:  # "/" alone is no secret, and is in every message
            text = text.replace(secret, "…")
    return text


def _headers(
    username: str | None, password: str | None, given: Mapping[str, str]
) -> dict[str, str]:
    headers = {"User-Agent": "oncelog"}
    if username is not None:  # http://user:token@host/...: the request's basic credentials
        import base64
        from urllib.parse import unquote

        pair = f"{unquote(username)}:{unquote(password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return {**headers, **given}


class _Deadline:
    """Shuts a connection's socket down once the delivery's time is up, wherever the
    delivery then is: the read it blocks in returns at once."""

    def __init__(self, connection: HTTPConnection, seconds: float) -> None:
        import threading

        self.connection = connection
        self.passed = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def check(self) -> None:
        """Raise if the time is up (the connection may have been cut: what it read then
        is no answer)."""
        with self._lock:
            if self.passed:
                raise TimeoutError("the deadline passed while connecting")

    def cancel(self) -> None:
        self._timer.cancel()

    def _cut(self) -> None:
        with self._lock:
            self.passed = True
            sock = self.connection.sock
            if sock is None:
                return  # still connecting (each step bounded by the timeout): check says
            import socket
            from contextlib import suppress

            with suppress(OSError):  # already closed: nothing left to wake
                # The plain socket's shutdown, under TLS too: it wakes a blocked read.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
