"""oncelog's statements, raw: the floor under oncelog's per-step overhead, measured in the
same invocation as oncelog itself.

The child opens a ledger, runs the agent once to warm it, then records one more run of it:
every statement the SQLite store executes (through its kept cursor and its connection),
with its parameters, in order, and the commits after which the store fsyncs the WAL. The
ledger closed, a plain ``sqlite3`` connection on the same file, set up as the store's (its
pragmas read from the store's connection, the journal's link function registered),
executes those statements again for each new run id, with one ``fdatasync`` of the WAL
after the same commits: what SQLite, the kernel and the disk do for an oncelog run, with
none of oncelog's Python around it. Benchmark-only instrumentation: the recording replaces
the store's objects, not its code.

A parameter equal to the recorded run's id is replaced by the new run's; the others are
replayed as they were: the lease's owner (the new run is leased to it by its own insert,
so every fence matches), the idempotency keys, and what oncelog computed in Python at the
run's start (its time and its first two links, so a replayed run's chain does not
verify). Before timing, one replayed run is compared to the recorded one, row by row and
by the rows its statements changed, and every timed run counts the rows it changed: a
statement that silently matched nothing would make the floor too cheap.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, cast

import oncelog
from oncelog.records._chain import link
from oncelog.stores import SQLiteStore
from oncelog.stores._group_sync import GroupSync
from oncelog.stores._sqlite_write import LINK_FUNCTION

Runner = Callable[[str], None]
# Run ids of this child's own: the parent's runs (``warm-up``, ``run-N``) must be new to
# the file, or their first insert would match nothing.
WARM_UP, TEMPLATE, CHECK = "raw-warm-up", "raw-template", "raw-check"
# Connection settings that change what a write costs, read from the store's connection.
PRAGMAS = ("busy_timeout", "synchronous", "foreign_keys", "wal_autocheckpoint", "cache_size")
# A replayed run's rows, compared with the recorded run's.
ROWS = {
    "runs": "SELECT status, fencing_token FROM runs WHERE run_id = ?",
    "steps": "SELECT seq, step_id, type, kind, state, attempts FROM steps WHERE run_id = ? "
    "ORDER BY seq",
    "journal": "SELECT seq, event FROM journal WHERE run_id = ? ORDER BY id",
}
_fdatasync = getattr(os, "fdatasync", os.fsync)  # as the store: macOS has only fsync


class Statement(NamedTuple):
    sql: str
    params: tuple[Any, ...]
    run_id_at: tuple[int, ...]  # the positions of the parameters that are the run's id
    syncs: bool  # the store fsynced the WAL after it (a COMMIT)


class Template(NamedTuple):
    statements: tuple[Statement, ...]
    changes: int  # rows the recorded run's statements changed
    pragmas: dict[str, Any]


class Recording:
    """Stands in for the store's connection or its kept cursor: each statement executed
    through it goes to ``executed``, then to the object it wraps."""

    def __init__(self, wrapped: Any, executed: list[tuple[str, tuple[Any, ...]]]) -> None:
        self._wrapped = wrapped
        self._executed = executed

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        self._executed.append((sql, tuple(parameters)))
        return self._wrapped.execute(sql, parameters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


def statement(sql: str, params: tuple[Any, ...], syncs: bool) -> Statement:
    for value in params:
        if isinstance(value, str) and TEMPLATE in value and value != TEMPLATE:
            raise RuntimeError(f"a parameter embeds the recorded run's id: {value[:200]!r}")
    run_id_at = tuple(i for i, value in enumerate(params) if value == TEMPLATE)
    return Statement(sql, params, run_id_at, syncs)


def record(db: Path, agent: Callable[[oncelog.Ledger], Runner]) -> Template:
    """One warm run of ``agent`` on a new ledger at ``db``: every statement it executed."""
    ledger = oncelog.open(str(db))
    store = cast(SQLiteStore, ledger.store)
    run = agent(ledger)
    run(WARM_UP)
    pragmas = {name: store._db.execute(f"PRAGMA {name}").fetchone()[0] for name in PRAGMAS}
    executed: list[tuple[str, tuple[Any, ...]]] = []
    synced: set[int] = set()  # how many statements were executed at each fsync of the WAL
    sync_wal = store._sync_wal

    def recorded_sync(group: GroupSync, ticket: int) -> None:
        sync_wal(group, ticket)
        synced.add(len(executed))

    # setattr: mypy would refuse the stand-ins, which are not a Connection and a Cursor.
    for name in ("_db", "_cursor"):
        setattr(store, name, Recording(getattr(store, name), executed))
    setattr(store, "_sync_wal", recorded_sync)  # noqa: B010
    before = store._db.total_changes
    run(TEMPLATE)
    changes = store._db.total_changes - before
    ledger.close()
    statements = (statement(sql, p, n + 1 in synced) for n, (sql, p) in enumerate(executed))
    return Template(tuple(statements), changes, pragmas)


def check_reads(template: Template) -> None:
    """The reads the store makes beside its writes (whether the file changed, the halts)
    are in the recording: a path missed by it would leave their cost out of the floor."""
    sqls = [s.sql for s in template.statements]
    if "PRAGMA data_version" not in sqls or not any(
        sql.startswith("SELECT") and " FROM halts " in sql for sql in sqls
    ):
        raise RuntimeError("the recording holds no PRAGMA data_version or no halts read")


class Replay:
    """The recorded statements on a plain connection, for any new run id."""

    def __init__(self, db: Path, template: Template) -> None:
        self.connection = sqlite3.connect(db, isolation_level=None)
        for name, value in template.pragmas.items():
            self.connection.execute(f"PRAGMA {name} = {value}")
            if (got := self.connection.execute(f"PRAGMA {name}").fetchone()[0]) != value:
                raise RuntimeError(f"{db}: PRAGMA {name} is {got}, not {value}")
        if (mode := self.connection.execute("PRAGMA journal_mode").fetchone()[0]) != "wal":
            raise RuntimeError(f"{db}: journal_mode is {mode}, not wal")
        self.connection.create_function(LINK_FUNCTION, 6, link, deterministic=True)
        self._cursor = self.connection.cursor()
        self._wal = f"{db}-wal"
        self._wal_fd: int | None = None  # opened at the first sync, as the store's
        self._template = template

    def run(self, run_id: str) -> None:
        cursor, before = self._cursor, self.connection.total_changes
        for sql, params, run_id_at, syncs in self._template.statements:
            bound: tuple[Any, ...] | list[Any] = params
            if run_id_at:
                bound = list(params)
                for i in run_id_at:
                    bound[i] = run_id
            cursor.execute(sql, bound).fetchall()
            if syncs:
                self._sync_wal()
        if (changed := self.connection.total_changes - before) != self._template.changes:
            raise RuntimeError(
                f"run {run_id!r} changed {changed} rows, the recorded run "
                f"{self._template.changes}: a replayed statement matched nothing"
            )

    def _sync_wal(self) -> None:
        if self._wal_fd is None:
            self._wal_fd = os.open(self._wal, os.O_RDWR | os.O_CLOEXEC)
        _fdatasync(self._wal_fd)

    def check(self) -> None:
        """Replay one run and compare its rows with the recorded run's."""
        self.run(CHECK)
        for table, sql in ROWS.items():
            recorded = self.connection.execute(sql, (TEMPLATE,)).fetchall()
            replayed = self.connection.execute(sql, (CHECK,)).fetchall()
            if not recorded or replayed != recorded:
                raise RuntimeError(f"{table}: replayed {replayed}, recorded {recorded}")


def replayed(db: Path, agent: Callable[[oncelog.Ledger], Runner]) -> Runner:
    """``agent``'s statements, recorded on a ledger at ``db``, replayed raw and checked."""
    template = record(db, agent)
    check_reads(template)
    replay = Replay(db, template)
    replay.check()
    return replay.run
