"""A provider process that answers every POST as a provider with idempotency keys answers
a repeated key: with the status and JSON body it was started with.

    python tests/support/key_provider.py --requests FILE --status 409 --body JSON

It prints ``PORT <n>`` once it listens on 127.0.0.1. Each POST's ``Idempotency-Key``
header is appended to ``--requests`` and fsynced before the answer, so the file counts
what reached the provider whatever the client and the ledger believe.
"""

from __future__ import annotations

import argparse
import os
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--status", type=int, required=True)
    parser.add_argument("--body", required=True)
    return parser.parse_args()


def handler(options: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    class Answer(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with options.requests.open("a") as requests:
                requests.write(f"{self.headers.get('Idempotency-Key', '')}\n")
                requests.flush()
                os.fsync(requests.fileno())
            body = options.body.encode()
            self.send_response(options.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Answer


def main() -> None:
    options = parse()
    server = HTTPServer(("127.0.0.1", 0), handler(options))
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
