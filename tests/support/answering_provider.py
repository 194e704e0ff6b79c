"""A provider process that performs every POST it receives and then answers it badly, for
the attacks on the shipped failure classifiers.

    python tests/support/answering_provider.py --performed FILE --answer 302|303|307|drop|503
        [--to URL]

It prints ``PORT <n>`` once it listens on 127.0.0.1. Each POST is performed first: a line
appended to ``--performed`` and fsynced, so the file is the truth about what happened
whatever the client and the ledger believe. Then:

- ``302``, ``303``, ``307``: a redirect to ``--to`` (a port that refuses connections),
  and it keeps listening;
- ``drop``: the connection is closed without an answer, and ``503``: a 503; after either
  it stops listening (every connection is refused) until it is sent SIGUSR1, when it
  listens on the same port again.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

REDIRECTS = ("302", "303", "307")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--performed", type=Path, required=True)
    parser.add_argument("--answer", choices=(*REDIRECTS, "drop", "503"), required=True)
    parser.add_argument("--to", default="")
    return parser.parse_args()


def handler(options: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    class Perform(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with options.performed.open("ab") as performed:
                performed.write(body.replace(b"\n", b" ") + b"\n")
                performed.flush()
                os.fsync(performed.fileno())
            if options.answer == "drop":
                self.close_connection = True
                return
            self.send_response(int(options.answer))
            if options.answer in REDIRECTS:
                self.send_header("Location", options.to)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Perform


def main() -> None:
    options = parse()
    listen_again = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: listen_again.set())
    server = HTTPServer(("127.0.0.1", 0), handler(options))
    port = server.server_address[1]
    print(f"PORT {port}", flush=True)
    while True:
        server.handle_request()
        if options.answer in REDIRECTS:
            continue
        server.server_close()  # refused from now on
        listen_again.wait()
        listen_again.clear()
        server = HTTPServer(("127.0.0.1", port), handler(options))


if __name__ == "__main__":
    main()
