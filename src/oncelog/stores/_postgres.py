"""The store for many machines: PostgreSQL through psycopg 3 and a connection pool, with
exactly the semantics of the SQLite store.

Where SQLite has one writer at a time, PostgreSQL has row locks: every write transaction
that checks a fencing token locks its run's row first (``_sql_tx.fence``), so writers
of one run serialize and each sees what the previous one committed. Lease expiry is judged
by the server's clock. Open it with a ``postgresql://`` URL; ``options=-csearch_path=NAME``
keeps the ledger in its own schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from .._exceptions import ConfigurationError
from ._postgres_listen import decisions
from ._postgres_migrate import migrate
from ._postgres_pool import POSTGRES, connect, describe, open_pool, reading, transaction
from ._protocol import DURABILITY, DecisionFeed
from ._sql import Tx
from ._sql_store import SQLStore


class PostgresStore(SQLStore):
    """A pool of connections per store object, shared by its threads."""

    dialect = POSTGRES

    def __init__(self, url: str, *, durability: str = "intent", create: bool = True) -> None:
        if durability not in DURABILITY:
            raise ConfigurationError(
                f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}"
            )
        # Every mode commits with synchronous_commit = on: the server's WAL flush is what
        # makes an intent survive a crash of the server, whatever the agent process does.
        self.durability = durability
        self.where = describe(url)
        with connect(url) as conn:
            migrate(conn, self.where, create=create)
        self._pool = open_pool(url)
        self._url = url

    def decisions(self) -> AbstractContextManager[DecisionFeed]:
        return decisions(self._url)

    @contextmanager
    def _tx(self, *, durable: bool = True) -> Iterator[Tx]:
        # Every commit is flushed, ``durable`` or not (see __init__).
        with transaction(self._pool, self.where) as cur:
            yield Tx(cur, POSTGRES)

    @contextmanager
    def _reading(self) -> Iterator[Tx]:
        with reading(self._pool, self.where) as cur:
            yield Tx(cur, POSTGRES)

    def close(self) -> None:
        self._pool.close()
