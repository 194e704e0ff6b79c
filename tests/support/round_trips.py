"""A proxy between an agent and PostgreSQL that counts round trips: the messages after
which the client waits for the server's ``ReadyForQuery``, a ``Sync`` (the extended
protocol, every statement psycopg runs) or a simple ``Query``. Exact, not timed. The
kill switches' listening connection (``_postgres_halts``), which talks on its own
schedule, is counted apart (``listening``)."""

from __future__ import annotations

import socket
import threading

from oncelog.stores._postgres_halts import APPLICATION_NAME

from .wire_proxy import ClientMessages, WireProxy

_WAITS = (b"S", b"Q")
_LISTENER = b"application_name\x00" + APPLICATION_NAME.encode() + b"\x00"


class RoundTrips(WireProxy):
    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(target)
        self.count = 0
        self.listening = 0
        self._lock = threading.Lock()

    def forward(
        self, data: bytes, stream: ClientMessages, client: socket.socket, server: socket.socket
    ) -> bool:
        # Counted before it is forwarded: once the answer is back, it is counted.
        waits = sum(1 for _, kind, _ in stream.feed(data) if kind in _WAITS)
        with self._lock:
            if _LISTENER in stream.parameters:
                self.listening += waits
            else:
                self.count += waits
        return super().forward(data, stream, client, server)
