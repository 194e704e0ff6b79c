"""Real HTTP endpoints for alert webhooks: a ``Receiver`` keeps the JSON bodies POSTed to it
(and counts every request, whatever its method); a ``HostileReceiver`` answers as a broken
or malicious webhook would."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, TypeVar

MiB = 1 << 20
HUGE = 300 * MiB
TRICKLE_EVERY = 3.0  # seconds between two bytes: far under any read timeout

Answer = Literal["trickle", "huge", "redirect", "fail"]


class Receiver(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.bodies: list[dict[str, object]] = []
        self.requests: list[str] = []  # the method of every request, a redirected one too
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        self.server.requests.append("POST")
        length = int(self.headers["Content-Length"])
        self.server.bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def do_GET(self) -> None:
        self.server.requests.append("GET")
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # the tests read the bodies, not the log


class HostileReceiver(http.server.ThreadingHTTPServer):
    """Answers each POST as ``answer`` says: ``trickle`` (a status line, then one byte of a
    header every ``trickle_every`` seconds, for ever), ``huge`` (a 300 MB body), ``redirect``
    (302 to ``elsewhere``) or ``fail`` (500). Keeps what it was sent (each line of a JSON
    lines body as one of ``bodies``) and what it sent."""

    def __init__(
        self, answer: Answer, elsewhere: str = "", trickle_every: float = TRICKLE_EVERY
    ) -> None:
        self.answer, self.elsewhere, self.trickle_every = answer, elsewhere, trickle_every
        self.bodies: list[dict[str, object]] = []
        self.requests: list[tuple[str, str | None]] = []  # path, Authorization header
        self.body_sent = 0  # bytes of the huge body the client took before it hung up
        self.answered = threading.Event()  # set once an answer has ended, however
        super().__init__(("127.0.0.1", 0), _HostileHandler)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _HostileHandler(http.server.BaseHTTPRequestHandler):
    server: HostileReceiver
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.server.requests.append((self.path, self.headers["Authorization"]))
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length).decode()
        if self.headers["Content-Type"] == "application/x-ndjson":  # a sink's batch
            self.server.bodies.extend(json.loads(line) for line in body.splitlines())
        else:
            self.server.bodies.append(json.loads(body))
        try:
            getattr(self, f"_{self.server.answer}")()
        except OSError:
            pass  # the client hung up: what the tests want of it
        finally:
            self.close_connection = True
            self.server.answered.set()

    def _trickle(self) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slowly: ")
        while True:
            time.sleep(self.server.trickle_every)
            self.wfile.write(b"z")

    def _huge(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(HUGE))
        self.end_headers()
        chunk = bytes(MiB)
        for _ in range(HUGE // MiB):
            self.wfile.write(chunk)
            self.server.body_sent += MiB

    def _redirect(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.server.elsewhere)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _fail(self) -> None:
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


Server = TypeVar("Server", bound=http.server.ThreadingHTTPServer)


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def receiving() -> Iterator[Receiver]:
    with serving(Receiver()) as server:
        yield server
