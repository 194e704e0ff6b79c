"""A TCP proxy between an agent and PostgreSQL that cuts the connection during a COMMIT.

It reads the client's side of the wire protocol well enough to know which statements each
transaction ran (``Parse`` names a statement's SQL, ``Bind`` runs it, a simple ``Query``
carries ``COMMIT``), and cuts the COMMIT of the ``occurrence``-th transaction whose
statements contain ``marker``. A statement run outside ``BEGIN`` is a transaction of its
own, committed by the ``Sync`` after it: that ``Sync`` is its COMMIT.

- ``committed=False``: both sockets are closed before the COMMIT reaches the server, which
  then rolls the transaction back;
- ``committed=True``: the COMMIT is forwarded, the server's answer (sent only once the
  commit is durable) is read and dropped, then both sockets are closed.

Either way the client sees its connection break during COMMIT and cannot tell which.
The agent must connect with ``sslmode=disable`` so the messages are readable.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_NEGOTIATION_CODES = (80877103, 80877104)  # SSLRequest, GSSENCRequest: no type byte


@dataclass
class _ClientStream:
    """The client's messages on one connection, and the SQL of its open transaction."""

    startup: bool = True
    buffer: bytes = b""
    statements: dict[bytes, str] = field(default_factory=dict)
    transaction: list[str] = field(default_factory=list)
    explicit: bool = False  # inside BEGIN ... COMMIT

    def feed(self, data: bytes) -> Iterator[tuple[int, list[str]]]:
        """Yield (offset in ``data`` where a COMMIT message starts, its transaction's SQL)."""
        start = len(self.buffer)
        self.buffer += data
        pos = 0
        while True:
            header = 4 if self.startup else 5
            if len(self.buffer) - pos < header:
                break
            if self.startup:
                (length,) = struct.unpack("!I", self.buffer[pos : pos + 4])
                kind, body_at = b"", pos + 4
            else:
                kind = self.buffer[pos : pos + 1]
                (length,) = struct.unpack("!I", self.buffer[pos + 1 : pos + 5])
                body_at = pos + 5
            end = body_at + length - 4
            if len(self.buffer) < end:
                break
            body = self.buffer[body_at:end]
            if self.startup:
                code = struct.unpack("!I", body[:4])[0] if len(body) >= 4 else 0
                self.startup = code in _NEGOTIATION_CODES
            elif self._is_commit(kind, body):
                yield pos - start, list(self.transaction)
                self.transaction.clear()
            pos = end
        self.buffer = self.buffer[pos:]

    def _is_commit(self, kind: bytes, body: bytes) -> bool:
        if kind == b"P":  # Parse: statement name, SQL
            name, _, rest = body.partition(b"\0")
            self.statements[name] = rest.partition(b"\0")[0].decode()
        elif kind == b"B":  # Bind: portal name, statement name
            sql = self.statements.get(body.split(b"\0", 2)[1], "")
            if sql.strip().upper() == "BEGIN":
                self._begin()
            else:
                self.transaction.append(sql)
        elif kind == b"S":  # Sync: commits a statement run outside BEGIN
            return not self.explicit and bool(self.transaction)
        elif kind == b"Q":
            query = body.rstrip(b"\0").decode().strip().upper()
            if query == "BEGIN":
                self._begin()
            elif query in ("COMMIT", "ROLLBACK"):
                self.explicit = False
            return query == "COMMIT"
        return False

    def _begin(self) -> None:
        self.transaction.clear()
        self.explicit = True


class CommitCutter:
    def __init__(
        self, target: tuple[str, int], marker: str, occurrence: int, committed: bool
    ) -> None:
        self.target = target
        self.marker = marker
        self.occurrence = occurrence
        self.committed = committed
        self.seen = 0
        self.cut = threading.Event()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        self._threads: list[threading.Thread] = []

    def _should_cut(self, transaction: list[str]) -> bool:
        if not any(self.marker in sql for sql in transaction):
            return False
        with self._lock:
            self.seen += 1
            return self.seen == self.occurrence

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
        stream = _ClientStream()
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
                    if not data or self._forward(data, stream, client, server):
                        return

    def _forward(
        self, data: bytes, stream: _ClientStream, client: socket.socket, server: socket.socket
    ) -> bool:
        """Forward ``data``; True once the connection was cut."""
        for offset, transaction in stream.feed(data):
            if self._should_cut(transaction):
                if self.committed:
                    server.sendall(data)
                    server.recv(65536)  # the answer comes once the commit is durable
                else:
                    server.sendall(data[:offset])
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
                self.cut.set()
                return True
        server.sendall(data)
        return False

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


@contextmanager
def commit_cutter(
    target: tuple[str, int], marker: str, occurrence: int, *, committed: bool
) -> Iterator[CommitCutter]:
    cutter = CommitCutter(target, marker, occurrence, committed)
    thread = threading.Thread(target=cutter.serve, daemon=True)
    thread.start()
    try:
        yield cutter
    finally:
        cutter.close()
        thread.join(timeout=5)
