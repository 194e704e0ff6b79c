"""A stand-in email provider: a separate process that records every email it accepts.

It honours ``Idempotency-Key`` the way Stripe does: a repeated key returns the first
answer and sends nothing. Run as ``python -m oncelog._demo.mailer OUTBOX PORTFILE``.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse


class Outbox:
    """Accepted emails, one JSON line each, flushed before the provider answers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def all(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def send(self, key: str | None, message: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if key:
                for sent in self.all():
                    if sent.get("key") == key:
                        return dict(sent)
            sent = {"id": f"msg_{len(self.all()) + 1}", "key": key, **message}
            with self.path.open("a") as f:
                f.write(json.dumps(sent) + "\n")
            return sent


def _handler(outbox: Outbox) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            self._answer(outbox.send(self.headers.get("Idempotency-Key"), body))

        def do_GET(self) -> None:
            wanted = parse_qs(urlparse(self.path).query).get("key", [None])[0]
            found = [m for m in outbox.all() if wanted is None or m.get("key") == wanted]
            self._answer({"data": found})

        def _answer(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    outbox, port_file = Path(sys.argv[1]), Path(sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Outbox(outbox)))
    port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
