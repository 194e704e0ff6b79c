"""A TCP proxy between a PostgreSQL client and its server that reads the client's side of
the wire protocol: the base of the tests' proxies that count round trips
(``round_trips``) or cut a commit (``commit_cutter``). The client must connect with
``sslmode=disable`` so the messages are readable."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

_NEGOTIATION_CODES = (80877103, 80877104)  # SSLRequest, GSSENCRequest: no type byte
P = TypeVar("P", bound="WireProxy")


@dataclass
class ClientMessages:
    """The client's messages on one connection, cut out of what it sends."""

    startup: bool = True
    buffer: bytes = b""
    parameters: bytes = b""  # the startup message's: user, database, application_name...

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes, bytes]]:
        """Yield (offset in ``data`` where a message starts, its type, its body) for each
        whole message after the startup ones; the rest waits for more data."""
        start = len(self.buffer)
        self.buffer += data
        pos = 0
        while True:
            header = 4 if self.startup else 5
            if len(self.buffer) - pos < header:
                break
            kind = b"" if self.startup else self.buffer[pos : pos + 1]
            length_at = pos + len(kind)
            (length,) = struct.unpack("!I", self.buffer[length_at : length_at + 4])
            end = length_at + length
            if len(self.buffer) < end:
                break
            body = self.buffer[length_at + 4 : end]
            if self.startup:
                code = struct.unpack("!I", body[:4])[0] if len(body) >= 4 else 0
                self.startup = code in _NEGOTIATION_CODES
                self.parameters = body
            else:
                yield pos - start, kind, body
            pos = end
        self.buffer = self.buffer[pos:]


class WireProxy:
    """Forwards both ways; ``forward`` sees each chunk the client sends and may cut."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        self._threads: list[threading.Thread] = []

    def url(self, url: str) -> str:
        """``url`` (naming ``target``) through this proxy, unencrypted."""
        host, port = self.target
        proxied = url.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.port}/")
        assert proxied != url, f"{url} does not name {host}:{port}"
        return f"{proxied}{'&' if '?' in proxied else '?'}sslmode=disable"

    def stream(self) -> ClientMessages:
        """The state kept per client connection."""
        return ClientMessages()

    def forward(
        self, data: bytes, stream: ClientMessages, client: socket.socket, server: socket.socket
    ) -> bool:
        """Forward ``data`` from the client; True once the connection was cut."""
        server.sendall(data)
        return False

    def serve(self) -> None:
        self._listener.settimeout(0.2)  # closing a socket does not wake a blocked accept()
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            thread = threading.Thread(target=self._pump, args=(client,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _pump(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):  # either side may hang up at any time
            self._pump_until_closed(client)

    def _pump_until_closed(self, client: socket.socket) -> None:
        stream = self.stream()
        with client, socket.create_connection(self.target) as server:
            while not self._closing:
                ready, _, _ = select.select([client, server], [], [], 0.5)
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        return
                    client.sendall(data)
                if client in ready:
                    data = client.recv(65536)
                    if not data or self.forward(data, stream, client, server):
                        return

    def __enter__(self: P) -> P:
        """Serving from now until the block ends."""
        self._threads.append(threading.Thread(target=self.serve, daemon=True))
        self._threads[-1].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing = True
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)
