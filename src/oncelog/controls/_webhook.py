"""POSTing an alert or a notice as JSON to a webhook, without letting the receiver hold,
flood or redirect the agent, and without logging the secret its URL may carry.

The whole delivery (connecting, sending, the answer's status line and headers) has one
deadline: a socket's timeout bounds each read alone, and a receiver that trickles a byte
every few seconds renews it for ever. Only the status is read, never the body, so a huge
answer costs nothing. A redirect is not followed (it would take the alert elsewhere): a
3xx is a failed delivery. A webhook URL often carries its token (in the userinfo, the path
or the query): the log names only the scheme, host and port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._log import log

if TYPE_CHECKING:
    from http.client import HTTPConnection

DEADLINE = 5.0  # seconds for a whole delivery; a slow receiver must not hold the run


def post_json(url: str, body: str, what: str) -> bool:
    """POST ``body`` to ``url``; True if the receiver answered 2xx within ``DEADLINE``
    seconds, else logged."""
    # Imported here: http.client pulls in socket, email and ssl, a third of the import
    # time of the whole package, for agents that have no webhook.
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = kind(parts.hostname or "", parts.port, timeout=DEADLINE)
    except ValueError as exc:  # a port that is not a number
        log.error("alert webhook %s failed: %s (%s)", redacted(url), exc, what)
        return False
    deadline = _Deadline(connection)
    try:
        connection.connect()
        deadline.check()
        target = f"{parts.path or '/'}{'?' if parts.query else ''}{parts.query}"
        connection.request("POST", target, body.encode(), _headers(parts.username, parts.password))
        status = connection.getresponse().status
        deadline.check()  # cut short, headers end where the stream did: not an answer
    except (OSError, http.client.HTTPException, ValueError) as exc:
        failure = f"no answer within {DEADLINE:g} s (timed out)" if deadline.passed else exc
        log.error("alert webhook %s failed: %s (%s)", redacted(url), failure, what)
        return False
    finally:
        deadline.cancel()
        connection.close()  # unread: whatever body followed the status is dropped
    if not 200 <= status < 300:
        log.error("alert webhook %s failed: it answered %d (%s)", redacted(url), status, what)
        return False
    return True


def redacted(url: str) -> str:
    """``url`` as logged: its scheme, host and port, without what may be a secret."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…"


def _headers(username: str | None, password: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "oncelog"}
    if username is not None:  # http://user:token@host/...: the request's basic credentials
        import base64
        from urllib.parse import unquote

        pair = f"{unquote(username)}:{unquote(password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return headers


class _Deadline:
    """Shuts a connection's socket down once the delivery's time is up, wherever the
    delivery then is: the read it blocks in returns at once."""

    def __init__(self, connection: HTTPConnection) -> None:
        import threading

        self.connection = connection
        self.passed = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(DEADLINE, self._cut)
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
