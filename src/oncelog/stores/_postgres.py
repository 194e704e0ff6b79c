"""The store for many machines: PostgreSQL through psycopg 3 and a connection pool, with
exactly the semantics of the SQLite store.

Where SQLite has one writer at a time, PostgreSQL has row locks: every write transaction
that checks a fencing token locks its run's row first (``_sql_tx.fence``), so writers
of one run serialize and each sees what the previous one committed. Lease expiry is judged
by the server's clock. Open it with a ``postgresql://`` URL; ``options=-csearch_path=NAME``
keeps the ledger in its own schema; ``oncelog_timeout=S`` (or ``store_timeout`` given to
``oncelog.open``) bounds every call, see ``_postgres_settings``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg

from .._exceptions import ConfigurationError
from ..records._records import StepState
from ..runtime import _crashpoints as crashpoints
from ._postgres_deadline import WATCHDOG
from ._postgres_listen import decisions
from ._postgres_migrate import migrate
from ._postgres_pool import POSTGRES, Calls, connect, describe, store_error
from ._postgres_settings import take_timeout
from ._postgres_transitions import (
    INTENT,
    OUTCOME,
    RECORD,
    LongWay,
    intent_params,
    outcome_params,
    record_params,
    refusal,
    takes_function,
)
from ._protocol import DURABILITY, DecisionFeed, Intent, Lease, NewStep, Outcome
from ._sql import Tx
from ._sql_store import SQLStore
from ._sql_tx import fence


class PostgresStore(SQLStore):
    """A pool of connections per store object, shared by its threads."""

    dialect = POSTGRES

    def __init__(
        self,
        url: str,
        *,
        durability: str = "intent",
        create: bool = True,
        timeout: float | None = None,
    ) -> None:
        if durability not in DURABILITY:
            raise ConfigurationError(
                f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}"
            )
        # Every mode commits with synchronous_commit = on: the server's WAL flush is what
        # makes an intent survive a crash of the server, whatever the agent process does.
        self.durability = durability
        url, self.timeout = take_timeout(url, timeout)
        self.where = describe(url)
        self._migrate(url, create)
        self._calls = Calls(url, self.timeout)
        self._url = url

    def _migrate(self, url: str, create: bool) -> None:
        """Migrations are store calls like any other: a migration that needs longer than
        the timeout is applied by opening once with a longer one."""
        with connect(url, self.timeout) as conn:
            try:
                with WATCHDOG.guard(conn, time.monotonic() + self.timeout) as guard:
                    migrate(conn, self.where, create=create)
            except psycopg.Error as exc:
                cut = self.timeout if guard.cut else None
                raise store_error(exc, self.where, cut_after=cut) from exc

    def decisions(self) -> AbstractContextManager[DecisionFeed]:
        return decisions(self._url, self.timeout)

    @contextmanager
    def _tx(self, *, durable: bool = True) -> Iterator[Tx]:
        # Every commit is flushed, ``durable`` or not (see __init__).
        with self._calls.transaction() as cur:
            yield Tx(cur, POSTGRES)

    # An intent and an outcome: one round trip each (``_postgres_transitions``).

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        if not takes_function(lease, step, previous):
            return super().write_intent(lease, step, previous, reason)
        # The point before the commit is before the call: the call is the commit.
        crashpoints.reach("before_intent_commit", step.step_id)
        try:
            self._calls.call(INTENT, intent_params(lease, step, reason), refusal(lease, step))
            return Intent(1, ())
        except LongWay:
            with self._tx() as tx:  # the point above was passed already
                return self._begin_step(tx, lease, step, previous, reason)

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        crashpoints.reach("before_outcome_commit", step.step_id)
        params = outcome_params(lease, step, attempt, outcome)
        try:
            self._calls.call(OUTCOME, params, refusal(lease, None))
        except LongWay:  # a time whose text is not Python's: the hash is made here
            with self._tx(durable=False) as tx:  # the point above was passed already
                fence(tx, lease)
                self._end_step(tx, lease, step.seq, attempt, outcome)

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        if takes_function(lease, step, previous):
            try:
                self._calls.call(RECORD, record_params(lease, step, outcome), refusal(lease, step))
                return
            except LongWay:
                pass
        super().record_step(lease, step, previous, outcome)

    @contextmanager
    def _reading(self) -> Iterator[Tx]:
        with self._calls.reading() as cur:
            yield Tx(cur, POSTGRES)

    def close(self) -> None:
        self._calls.close()
