"""A provider process that takes no idempotency key and keeps what it is sent, with a
search served from a replica that lags the writes, as most providers' searches do.

    python tests/support/marker_provider.py --performed FILE [--lag SECONDS]

It prints ``PORT <n>`` once it listens on 127.0.0.1.

    POST /messages  {"text"}  -> {"id"}: performed (a line appended to ``--performed``
                                         and fsynced) before the answer, every time
    GET  /search?q=WORD       -> {"items": [{"id", "text"}]}: the messages whose text
                                 holds WORD, among those written ``--lag`` seconds ago
                                 or earlier (the replica); the newer ones are not seen
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse


class Messages:
    def __init__(self, performed: Path, lag: float) -> None:
        self.performed, self.lag = performed, lag
        self.kept: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def add(self, text: str) -> dict[str, Any]:
        with self.lock:
            message = {"id": len(self.kept) + 1, "text": text}
            with self.performed.open("a") as performed:
                performed.write(json.dumps(message) + "\n")
                performed.flush()
                os.fsync(performed.fileno())
            self.kept.append((time.monotonic(), message))
            return message

    def search(self, word: str) -> list[dict[str, Any]]:
        seen_until = time.monotonic() - self.lag
        with self.lock:
            return [m for at, m in self.kept if at <= seen_until and word and word in m["text"]]


def handler(messages: Messages) -> type[BaseHTTPRequestHandler]:
    class Provider(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.answer(201, messages.add(str(body["text"])))

        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path != "/search":
                self.answer(404, {"error": "not found"})
                return
            word = parse_qs(url.query).get("q", [""])[0]
            self.answer(200, {"items": messages.search(word)})

    return Provider


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--performed", type=Path, required=True)
    parser.add_argument("--lag", type=float, default=0.0)
    options = parser.parse_args()
    messages = Messages(options.performed, options.lag)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(messages))
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
