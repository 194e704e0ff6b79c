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
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .wire_proxy import ClientMessages, WireProxy


@dataclass
class _ClientStream(ClientMessages):
    """The client's messages on one connection, and the SQL of its open transaction."""

    statements: dict[bytes, str] = field(default_factory=dict)
    transaction: list[str] = field(default_factory=list)
    explicit: bool = False  # inside BEGIN ... COMMIT

    def commits(self, data: bytes) -> Iterator[tuple[int, list[str]]]:
        """Yield (offset in ``data`` where a COMMIT message starts, its transaction's SQL)."""
        for offset, kind, body in self.feed(data):
            if self._is_commit(kind, body):
                yield offset, list(self.transaction)
                self.transaction.clear()

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


class CommitCutter(WireProxy):
    def __init__(
        self, target: tuple[str, int], marker: str, occurrence: int, committed: bool
    ) -> None:
        super().__init__(target)
        self.marker = marker
        self.occurrence = occurrence
        self.committed = committed
        self.seen = 0
        self.cut = threading.Event()
        self._lock = threading.Lock()

    def _should_cut(self, transaction: list[str]) -> bool:
        if not any(self.marker in sql for sql in transaction):
            return False
        with self._lock:
            self.seen += 1
            return self.seen == self.occurrence

    def stream(self) -> _ClientStream:
        return _ClientStream()

    def forward(
        self, data: bytes, stream: ClientMessages, client: socket.socket, server: socket.socket
    ) -> bool:
        assert isinstance(stream, _ClientStream)
        for offset, transaction in stream.commits(data):
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


@contextmanager
def commit_cutter(
    target: tuple[str, int], marker: str, occurrence: int, *, committed: bool
) -> Iterator[CommitCutter]:
    with CommitCutter(target, marker, occurrence, committed) as cutter:
        yield cutter
