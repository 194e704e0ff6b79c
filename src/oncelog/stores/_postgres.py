"""The store for many machines: PostgreSQL through psycopg 3 and a connection pool, with
exactly the semantics of the SQLite store.

Where SQLite has one writer at a time, PostgreSQL has row locks: every write transaction
that checks a fencing token locks its run's row first (``_sql_tx.fence``), so writers
of one run serialize and each sees what the previous one committed. Lease expiry is judged
by the server's clock. Open it with a ``postgresql://`` URL; ``options=-csearch_path=NAME``
keeps the ledger in its own schema; ``oncelog_timeout=S`` (or ``store_timeout`` given to
``oncelog.open``) bounds every call, see ``_postgres_settings``.

Durability, as SQLite's modes (``_sqlite.py``) with the WAL flush for the fsync: ``full``
waits for the flush at every commit; ``intent`` (the default) at every commit but an
outcome's, a model call's or a read's record and a run's start (``_tx(durable=False)``),
which ride on the next flushed commit: a flush writes the WAL up to its own commit, so
every commit before it; ``process`` at none. A crash of the server can lose what was not
flushed; a run that made such commits is written further only on connections of the same
life of the server (``_postgres_pool.Calls``): after a crash its next write raises
``StoreUnavailable``, and the next process reads back what is durable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

import psycopg

from .._exceptions import ConfigurationError
from ..records._records import Halt, HaltScope, RunStatus, StepState, SubjectClaim
from ..signals import _crashpoints as crashpoints
from ._postgres_deadline import WATCHDOG
from ._postgres_halts import HaltWatch, forget_everywhere
from ._postgres_listen import decisions
from ._postgres_migrate import migrate
from ._postgres_pool import POSTGRES, Calls, Refusal, connect, describe, store_error
from ._postgres_settings import take_timeout
from ._postgres_transitions import (
    INTENT,
    OUTCOME,
    RECORD,
    UNFLUSHED,
    LongWay,
    intent_params,
    outcome_params,
    record_params,
    refusal,
    takes_function,
)
from ._protocol import (
    DURABILITY,
    DecisionFeed,
    Intent,
    Lease,
    NewStep,
    Outcome,
)
from ._sql import Tx
from ._sql_store import SQLStore
from ._sql_tx import fence

# The lease whose run a transaction of the shared code writes, set around those calls.
_WRITING: ContextVar[Lease | None] = ContextVar("oncelog_postgres_writing", default=None)
LeaseKey = tuple[str, str, int]


def _key(lease: Lease) -> LeaseKey:
    return (lease.run_id, lease.owner, lease.token)


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
        self.durability = durability
        # Whether a commit waits for its WAL flush: (a durable one, one that may ride on
        # the next), as SQLite's synchronous levels.
        self._flushes = {"intent": (True, False), "full": (True, True)}.get(
            durability, (False, False)
        )
        unflushed = self._flushes == (True, False)
        self._outcome_sql, self._record_sql = (
            (OUTCOME + UNFLUSHED, RECORD + UNFLUSHED) if unflushed else (OUTCOME, RECORD)
        )
        # Per lease, the server's life of its commits not flushed yet (see the docstring).
        self._unflushed: dict[LeaseKey, str] = {}
        # Per lease, the id of the journal record its last call appended: where the
        # server starts looking for the chain's head (0022; only a hint, the head is
        # found without it).
        self._appended: dict[LeaseKey, int | None] = {}
        url, self.timeout = take_timeout(url, timeout)
        self.where = describe(url)
        self._migrate(url, create)
        self._calls = Calls(url, self.timeout, flushed=self._flushes[0])
        self._url = url
        self.halt_watch = HaltWatch(url, self.timeout)

    def _migrate(self, url: str, create: bool) -> None:
        """Migrations are store calls like any other: a migration that needs longer than
        the timeout is applied by opening once with a longer one."""
        with connect(url, self.timeout) as conn:
            try:
                with WATCHDOG.guard(conn, time.monotonic() + self.timeout) as guard:
                    self.created = migrate(conn, self.where, create=create)
            except psycopg.Error as exc:
                cut = self.timeout if guard.cut else None
                raise store_error(exc, self.where, cut_after=cut) from exc

    # The kill switch of a model call or a read, looked at before it runs: in memory when
    # that shows no switch covers the run (``_postgres_halts``), so the call costs its
    # record's round trip alone; from the server otherwise. An effect looks inside its
    # intent, as before.

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        if self.halt_watch.covers_none(run_id, agent):
            return None
        return super().active_halt(run_id, agent)

    def set_halt(
        self, scope: HaltScope, target: str, *, reason: str, by: str, ahead: bool = False
    ) -> Halt:
        try:
            return super().set_halt(scope, target, reason=reason, by=by, ahead=ahead)
        finally:  # committed or not: this process trusts no earlier read of the switches
            forget_everywhere()

    def decisions(self) -> AbstractContextManager[DecisionFeed]:
        return decisions(self._url, self.timeout)

    @contextmanager
    def _tx(self, *, durable: bool = True) -> Iterator[Tx]:
        lease = _WRITING.get()
        flushed = self._flushes[0 if durable else 1]
        # Only a transaction that differs from the session's setting says so.
        with self._calls.transaction(
            flushed=flushed or not self._flushes[0], life=self._life(lease)
        ) as (cur, life):
            yield Tx(cur, POSTGRES)
        if lease is not None:
            self._wrote(lease, life, flushed=flushed)

    @contextmanager
    def _writing(self, lease: Lease) -> Iterator[None]:
        """The shared code's transactions in this block write ``lease``'s run."""
        token = _WRITING.set(lease)
        try:
            yield
        finally:
            _WRITING.reset(token)

    def _life(self, lease: Lease | None) -> str | None:
        """The server's life a write of ``lease``'s run must be made in, if any."""
        return None if lease is None else self._unflushed.get(_key(lease))

    def _wrote(self, lease: Lease, life: str, *, flushed: bool) -> None:
        """A commit of ``lease``'s run in the server's ``life``: a flushed one made every
        earlier one durable (the life was checked before it)."""
        if flushed:
            self._unflushed.pop(_key(lease), None)
        else:
            self._unflushed[_key(lease)] = life

    # An intent, an outcome and a model call's or a read's record: one round trip each
    # (``_postgres_transitions``).

    def _transition(
        self, lease: Lease, sql: str, params: tuple[object, ...], refused: Refusal, flushed: bool
    ) -> None:
        """One call of a transition function, told where its chain head is (``_appended``,
        its last argument); ``LongWay`` if it hands the step back."""
        key = _key(lease)
        try:
            life, self._appended[key] = self._calls.call(
                sql, (*params, self._appended.get(key)), refused, self._life(lease)
            )
        except LongWay:
            self._appended.pop(key, None)  # the server may have found no record from it
            raise
        self._wrote(lease, life, flushed=flushed)

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        if not takes_function(lease, step, previous):
            with self._writing(lease):
                return super().write_intent(lease, step, previous, reason)
        # The point before the commit is before the call: the call is the commit.
        crashpoints.reach("before_intent_commit", step.step_id)
        params = intent_params(lease, step, reason)
        try:
            self._transition(lease, INTENT, params, refusal(lease, step), self._flushes[0])
        except LongWay:
            with self._writing(lease), self._tx() as tx:  # the point above was passed
                return self._begin_step(tx, lease, step, previous, reason)
        return Intent(1, ())

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        crashpoints.reach("before_outcome_commit", step.step_id)
        params = outcome_params(lease, step, attempt, outcome)
        try:
            self._transition(
                lease, self._outcome_sql, params, refusal(lease, None), self._flushes[1]
            )
        except LongWay:  # a time whose text is not Python's, no record from the hint
            with self._writing(lease), self._tx(durable=False) as tx:  # the point was passed
                fence(tx, lease)
                self._end_step(tx, lease, step.seq, attempt, outcome)

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        if takes_function(lease, step, previous):
            params = record_params(lease, step, outcome)
            try:
                self._transition(
                    lease, self._record_sql, params, refusal(lease, step), self._flushes[1]
                )
                return
            except LongWay:
                pass
        with self._writing(lease):
            super().record_step(lease, step, previous, outcome)

    def adopt_subject(
        self, lease: Lease, step: NewStep, previous: StepState | None, holder: SubjectClaim
    ) -> None:
        with self._writing(lease):
            super().adopt_subject(lease, step, previous, holder)

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        # The run's end, flushed, is written only if what it ends is all there.
        try:
            with self._writing(lease):
                super().finish(lease, status, reason, stopped_by)
        finally:
            self._unflushed.pop(_key(lease), None)  # this process writes the run no more
            self._appended.pop(_key(lease), None)

    @contextmanager
    def _reading(self) -> Iterator[Tx]:
        with self._calls.reading() as cur:
            yield Tx(cur, POSTGRES)

    def close(self) -> None:
        self.halt_watch.close()
        self._calls.close()
