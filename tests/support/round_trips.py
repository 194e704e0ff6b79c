"""A TCP proxy between an agent and PostgreSQL that counts round trips: the messages after
which the client waits for the server's ``ReadyForQuery``, a ``Sync`` (the extended
protocol, every statement psycopg runs) or a simple ``Query``. Exact, not timed.
The agent must connect with ``sslmode=disable`` so the messages are readable."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_NEGOTIATION_CODES = (80877103, 80877104)  # SSLRequest, GSSENCRequest: no type byte
_WAITS = (b"S", b"Q")


class RoundTrips:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.count = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        self._threads: list[threading.Thread] = []

    def url(self, url: str) -> str:
        """``url`` (of ``target``) through this proxy."""
        host, port = self.target
        proxied = url.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.port}/")
        assert proxied != url, f"{url} does not name {host}:{port}"
        return f"{proxied}{'&' if '?' in proxied else '?'}sslmode=disable"

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
        with contextlib.suppress(OSError), client, socket.create_connection(self.target) as server:
            startup, buffer = True, b""
            while not self._closing:
                ready, _, _ = select.select([client, server], [], [], 0.5)
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        return
                    client.sendall(data)
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    # Counted before it is forwarded: once the answer is back, it is counted.
                    startup, buffer = self._count(startup, buffer + data)
                    server.sendall(data)

    def _count(self, startup: bool, buffer: bytes) -> tuple[bool, bytes]:
        """Count the whole messages in ``buffer``; the startup state and what is left."""
        pos = 0
        while True:
            header = 4 if startup else 5
            if len(buffer) - pos < header:
                return startup, buffer[pos:]
            length_at = pos if startup else pos + 1
            (length,) = struct.unpack("!I", buffer[length_at : length_at + 4])
            end = length_at + length
            if len(buffer) < end:
                return startup, buffer[pos:]
            if startup:
                code = struct.unpack("!I", buffer[pos + 4 : pos + 8])[0] if length >= 8 else 0
                startup = code in _NEGOTIATION_CODES
            elif buffer[pos : pos + 1] in _WAITS:
                with self._lock:
                    self.count += 1
            pos = end

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


@contextmanager
def counting_round_trips(target: tuple[str, int]) -> Iterator[RoundTrips]:
    proxy = RoundTrips(target)
    thread = threading.Thread(target=proxy.serve, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.close()
        thread.join(timeout=5)
