"""A proxy between an agent and PostgreSQL that counts round trips: the messages after
which the client waits for the server's ``ReadyForQuery``, a ``Sync`` (the extended
protocol, every statement psycopg runs) or a simple ``Query``. Exact, not timed."""

from __future__ import annotations

import socket
import threading

from .wire_proxy import ClientMessages, WireProxy

_WAITS = (b"S", b"Q")


class RoundTrips(WireProxy):
    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(target)
        self.count = 0
        self._lock = threading.Lock()

    def forward(
        self, data: bytes, stream: ClientMessages, client: socket.socket, server: socket.socket
    ) -> bool:
        # Counted before it is forwarded: once the answer is back, it is counted.
        waits = sum(1 for _, kind, _ in stream.feed(data) if kind in _WAITS)
        with self._lock:
            self.count += waits
        return super().forward(data, stream, client, server)
