"""The embedded store: stdlib ``sqlite3``, safe for several processes on one machine.

Writer settings, and why:
- ``journal_mode=WAL``: readers never block the writer, and a commit appends to one file.
- ``synchronous``, set once by the durability mode (``_SYNCHRONOUS``) and read back,
  because a PRAGMA that fails is silently ignored. ``NORMAL`` writes a commit to the WAL
  (the OS has it: it survives the process being killed) and fsyncs the WAL only at a
  checkpoint; ``FULL`` also fsyncs it inside each commit. ``full`` is ``FULL``: every
  commit is durable before it is visible. ``intent`` (the default) is ``NORMAL``, and a
  commit that must be durable when it returns (an intent, a run's end) is followed by an
  ``fdatasync`` of the WAL (``_sync_wal``), after SQLite's write lock and the store's own
  lock are released, so other writers, in this process or another, need not wait for
  this one's disk. An fsync covers every frame written before it, so the outcomes and
  model/read records committed since the last one ride on it (one fsync per effect), and
  the durable commits of other threads made while one fsync runs share the next
  (``_group_sync.GroupSync``: a group commit). Such a commit is visible to other
  connections a moment before it is durable; nothing acts on it in that moment (the
  lease holder, who alone calls the tool, waits for the sync). ``process`` is ``NORMAL``
  and syncs nothing.
- ``BEGIN IMMEDIATE``: a write transaction takes the write lock when it starts, so two
  processes cannot both read a state and then both act on it.
- ``busy_timeout``: a writer waits for another instead of failing at once.
- ``wal_autocheckpoint`` left at SQLite's 1000 pages: an effect writes about nine, so
  the commit of about one effect in 110 also copies the WAL's pages into the file, in
  the agent's thread (about three fsyncs and twenty page writes: 0.02 fsync per
  effect on average). A larger WAL would save little of that and make every reader's
  WAL index and every recovery larger; a checkpoint in another thread would need a
  connection of its own.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from .._exceptions import (
    ConfigurationError,
    CorruptRecord,
    LedgerNotFound,
    OnceLogError,
    StoreUnavailable,
)
from ..records._records import Halt, HaltScope, RunStatus, StepState
from . import _sqlite_checked as checked
from . import _sqlite_runs as sqlite_runs
from . import _sqlite_write as write
from ._group_sync import GroupSync
from ._migrations import pending
from ._protocol import DURABILITY, Intent, Lease, NewStep, Outcome
from ._shared import intent_json, outcome_json, recorded_json
from ._sql import NOW, Dialect, Tx, json_field
from ._sql_store import SQLStore
from ._sqlite_totals import BUDGETED, ON_DEMAND, keep
from ._sqlite_write import end_step, insert_recorded, insert_step

# RETURNING, ON CONFLICT ... RETURNING, ->> and IS NOT DISTINCT FROM, which the shared
# statements use.
MINIMUM_VERSION = (3, 39, 0)
FULL, NORMAL = 2, 1
# By durability mode: (PRAGMA synchronous, whether a commit that must be durable when it
# returns is followed by an fdatasync of the WAL).
_SYNCHRONOUS = {"intent": (NORMAL, True), "full": (FULL, False), "process": (NORMAL, False)}
_CLOCK = "((julianday('now') - 2440587.5) * 86400.0)"
SQLITE = Dialect(
    name="sqlite",
    now=_CLOCK,
    today=f"(CAST({_CLOCK} / 86400 AS INTEGER) * 86400)",
    placeholder="?",
    # BEGIN IMMEDIATE gives each write transaction the database's only write lock, so the
    # row locks PostgreSQL needs are implied.
    for_update="",
    skip_locked="",
    json_field=json_field,
    unique_violation=(sqlite3.IntegrityError,),
)


def _is_damage(exc: sqlite3.Error) -> bool:
    message = str(exc)
    return "malformed" in message or "not a database" in message


def _store_error(exc: sqlite3.Error, path: str) -> Exception:
    message = str(exc)
    if _is_damage(exc):
        return CorruptRecord(f"the ledger at {path} is damaged: {message}")
    if "unable to open" in message:
        return StoreUnavailable(
            f"cannot open or create the ledger file {path} ({message}): can this process "
            "write to its folder?"
        )
    if "disk I/O error" in message and _disk_full(path):
        message += " (the disk is full)"  # what SQLite says when its shared memory cannot grow
    return StoreUnavailable(f"the ledger at {path} cannot be used: {message}")


def _disk_full(path: str) -> bool:
    try:
        return os.statvfs(os.path.dirname(path) or ".").f_bavail == 0
    except (OSError, AttributeError):  # no statvfs on Windows
        return False


def _make_folder(path: str) -> None:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(
            f"cannot create the folder of the ledger {path}: {exc.strerror or exc}"
        ) from exc


def _connect(path: str, busy_timeout: float, create: bool) -> sqlite3.Connection:
    """With ``create=False``, open the file only if it exists: ``mode=rw`` never creates
    it, even if it vanished after the check that gives the clear message."""
    where = path
    if not create:
        if path == ":memory:" or not os.path.isfile(path):
            raise LedgerNotFound(f"no ledger at {path}: the file does not exist")
        from pathlib import Path  # for as_uri; opening a ledger to write needs no pathlib

        where = f"{Path(path).absolute().as_uri()}?mode=rw"
    return sqlite3.connect(
        where,
        isolation_level=None,
        check_same_thread=False,
        timeout=busy_timeout,
        uri=not create,
    )


def _check_is_ledger(db: sqlite3.Connection, path: str) -> None:
    """An existing file that holds no ledger (a zero-byte file, another program's
    database) is refused before anything is written to it, WAL mode included."""
    found = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if found is None:
        raise LedgerNotFound(f"no ledger at {path}: the file holds no oncelog ledger")


def _refuse_damaged(db: sqlite3.Connection, path: str) -> None:
    """A damaged page is found before anything is written, not when a read first meets it
    (after this process may have written, and called a provider, beside it). The check
    reads the whole file: about 2 ms per 1,000 steps (docs/guarantees.md), so a file left
    whole and unchanged since is not checked again (``_sqlite_checked``)."""
    try:
        problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(3)").fetchall()]
    except sqlite3.DatabaseError as exc:
        if not _is_damage(exc):  # a full disk, an I/O error: not the file's fault
            raise
        problems = [str(exc)]  # a page too damaged for the check to walk past
    if problems != ["ok"]:
        raise CorruptRecord(
            f"the ledger at {path} is damaged ({'; '.join(problems)}); nothing was written "
            "to it. Restore it from a backup"
        )


class SQLiteStore(SQLStore):
    """One connection per store object, shared by its threads under a lock."""

    dialect = SQLITE

    def __init__(
        self,
        path: str,
        *,
        durability: str = "intent",
        busy_timeout: float = 30.0,
        create: bool = True,
    ) -> None:
        if durability not in _SYNCHRONOUS:
            raise ConfigurationError(
                f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}"
            )
        if sqlite3.sqlite_version_info < MINIMUM_VERSION:
            raise ConfigurationError(
                f"SQLite {sqlite3.sqlite_version} is too old for the ledger; it needs "
                f"{'.'.join(map(str, MINIMUM_VERSION))} or newer"
            )
        self.path = path
        self.where = path if path == ":memory:" else os.path.abspath(path)
        self.durability = durability
        # The fsyncs of the WAL after a durable commit; none where SQLite's level does
        # them (``full``), where nothing must (``process``) or in memory.
        self._group: GroupSync | None = None
        # (data_version, run_id, agent) when no switch was on for them (``active_halt``).
        self._no_halt: tuple[int, str, str | None] | None = None
        self._lock = threading.RLock()
        # The file this store found whole at its open, stamped when it closes it.
        self._whole = ""
        if path != ":memory:" and create:
            _make_folder(path)
            if not os.path.lexists(path):
                self._create(busy_timeout)
        self._open(busy_timeout, create)

    def _create(self, busy_timeout: float) -> None:
        """Make a new ledger appear at ``self.path`` whole or not at all: it is made and
        migrated under another name beside it, then linked into place. SQLite itself would
        create an empty file first, which a kill would leave there for every later open to
        refuse (a kill here leaves only a ``.new`` file beside it). A ledger another
        process linked there first is the one used. Where the ledger cannot be made beside
        it or linked (no hard links), it is created in place after all: that says what
        stops it, naming the ledger's own path."""
        path = self.path
        self.path = f"{path}.{os.getpid()}-{os.urandom(4).hex()}.new"
        try:
            self._open(busy_timeout, create=True)
            self.close()  # the last connection: SQLite copies the WAL in and removes it
            os.link(self.path, path)
        except (OnceLogError, OSError):
            pass
        finally:
            for made in (self.path, f"{self.path}-wal", f"{self.path}-shm"):
                with suppress(FileNotFoundError):
                    os.unlink(made)
            self.path, self._group = path, None

    def _open(self, busy_timeout: float, create: bool) -> None:
        path = self.path
        existing = path != ":memory:" and os.path.isfile(path)
        if existing and os.path.getsize(path) == 0:
            raise LedgerNotFound(
                f"no ledger at {path}: the file is empty (zero bytes), so it holds no "
                "oncelog ledger. A ledger truncated to nothing looks the same, and every "
                "effect in it would run again: restore it from a backup; if no ledger was "
                "ever there, delete the file and the next open creates one"
            )
        try:
            self._db = _connect(path, busy_timeout, create)
        except sqlite3.Error as exc:
            raise _store_error(exc, path) from exc
        # The cursor of every write transaction and of the statements around them (as
        # PostgreSQL's transactions share one): ``connection.execute`` makes a cursor for
        # each statement, about 1 k instructions to build, register and free. Reads
        # outside a transaction make their own, so a result left unread never holds a
        # snapshot open.
        self._cursor = self._db.cursor()
        try:
            if existing:
                real = os.path.realpath(path)
                if not checked.unchanged(real) and not checked.left_by_a_crash(real):
                    _refuse_damaged(self._db, path)
                self._whole = real
            if not create:
                _check_is_ledger(self._db, path)
            self._configure(busy_timeout)
            self._migrate()
            if self._whole:  # a ledger found whole: marked open (nothing beside another file)
                checked.mark_open(self._whole)
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, sqlite3.Error):
                raise _store_error(exc, path) from exc
            raise

    def _configure(self, busy_timeout: float) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        mode = self._wal(busy_timeout)
        if mode != "wal" and self.path != ":memory:":
            raise ConfigurationError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
        level, syncs_wal = _SYNCHRONOUS[self.durability]
        db.execute(f"PRAGMA synchronous = {level}")
        got = db.execute("PRAGMA synchronous").fetchone()[0]
        if got != level:
            raise ConfigurationError(f"{self.path}: PRAGMA synchronous is {got}, not {level}")
        db.execute("PRAGMA foreign_keys = ON")
        # Beside the file SQLite opened, which is the target of a symbolic link: SQLite
        # resolves the path it was given, and so must the sync. In memory, there is none.
        opened = db.execute("PRAGMA database_list").fetchone()[2]
        if syncs_wal and opened:
            self._group = GroupSync(opened + "-wal")

    def _sync_wal(self, group: GroupSync, ticket: int) -> None:
        """Make the commit with ``ticket`` durable: an ``fdatasync`` of the WAL, as
        ``FULL`` would have made inside it, or another thread's begun after it. SQLite
        keeps the WAL while any connection is open, so the descriptor, opened at the
        first sync, stays the file's. A failure raises ``StoreUnavailable``: the commit is
        in the WAL but perhaps not on the disk, so whether it was recorded is unknown (a
        later run finds an intent in doubt)."""
        try:
            group.wait(ticket)
        except OSError as exc:
            raise StoreUnavailable(
                f"the ledger at {self.path} cannot be used: disk I/O error (the commit "
                f"was written but its fsync failed: {exc.strerror or exc}); whether it "
                "was recorded is unknown"
            ) from exc

    def _wal(self, busy_timeout: float) -> str:
        """Switch a new file to WAL (a file already in WAL mode says so without a lock).
        Switching needs the file to itself for an instant, and SQLite does not wait for
        that through its busy handler: two processes opening a new ledger at once could
        fail with "database is locked". So wait here, up to the busy timeout."""
        mode = str(self._db.execute("PRAGMA journal_mode").fetchone()[0])
        deadline = time.monotonic() + busy_timeout
        while mode != "wal":
            try:
                mode = str(self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
            else:
                break
        return mode

    def _migrate(self) -> None:
        # A ledger that is up to date is read, not written: the write transaction below
        # would wait for any other writer, so a writer stopped inside its transaction
        # would hold every open back for the whole busy timeout.
        with suppress(sqlite3.OperationalError):  # no such table: a new file
            # fetchall: the statement runs to its end, so no read stays open.
            [(found,)] = self._db.execute("SELECT MAX(version) FROM schema_migrations").fetchall()
            if not pending("sqlite", found or 0, self.path):
                return
        with self._tx() as tx:
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            current = tx.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
            self.created = current == 0
            for migration in pending("sqlite", current, self.path):
                for statement in migration.statements():
                    self._db.execute(statement)
                tx.execute(
                    f"INSERT INTO schema_migrations VALUES (?, ?, {NOW})",
                    (migration.version, migration.name),
                )
                if migration.name == ON_DEMAND and tx.execute(BUDGETED).fetchone()[0]:
                    keep(tx)  # the totals' triggers it dropped, kept on without a gap

    def _tx(self, *, durable: bool = True) -> _Transaction:
        """One write transaction; anything that goes wrong rolls it back whole. Not
        ``durable``: it may commit without its own fsync (see ``_SYNCHRONOUS``)."""
        return _Transaction(self, durable)

    def _keep_totals(self, tx: Tx) -> None:
        keep(tx)

    def _insert_checked(
        self, tx: Tx, lease: Lease, step: NewStep, reason: str | None
    ) -> Intent | None:
        """The step's row with its checks, the lease kept, its journal entry."""
        started = write.clock() - step.elapsed
        if not insert_step(tx, lease, step, started):
            return None
        entry = intent_json(lease, step, 1, reason)
        write.append(tx, lease.run_id, step.seq, "intent", entry, started)
        return Intent(1, ())

    _create_leased = staticmethod(sqlite_runs.create_leased)

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        """The run's end, its fence in the update; the general path says why a lease that
        does not hold is lost."""
        with self._tx() as tx:
            if not sqlite_runs.finish(tx, lease, status, reason, stopped_by):
                self._finish(tx, lease, status, reason, stopped_by)

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        """A new model call or read with no budget to charge and no approval to use: its
        row written once, as it ended, and its one journal entry (``recorded``);
        otherwise the general path (as PostgreSQL's ``takes_function``)."""
        if previous is not None or lease.budgeted or step.needs_approval:
            super().record_step(lease, step, previous, outcome)
            return
        with self._tx(durable=False) as tx:
            finished = write.clock()
            started = finished - step.elapsed
            if not insert_recorded(tx, lease, step, outcome, started, finished):
                # The lease is lost or half used, or the step is a duplicate: the general
                # path's fence and insert say which, or extend the lease.
                self._record(tx, lease, step, None, outcome)
                return
            entry = recorded_json(lease, step, 1, outcome)
            write.append(tx, lease.run_id, step.seq, "recorded", entry, started)

    def _outcome(self, tx: Tx, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        if not end_step(tx, lease, seq, attempt, outcome):
            # The lease is lost or half used, or the step changed: the general path's fence
            # and update say which, or extend the lease and write the outcome.
            super()._outcome(tx, lease, seq, attempt, outcome)
            return
        data = outcome_json(outcome, attempt)
        write.append(tx, lease.run_id, seq, "outcome", data, write.clock())

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        """As the general store's, but once no switch was found on for the run, the halts
        table is read again only after the file changed: ``PRAGMA data_version`` moves
        with every commit of any other connection, and this one sets a switch only
        through ``set_halt``, which forgets the answer. A model call or read asks before
        each call; the pragma costs about a third of the query."""
        with self._lock:
            try:
                # One row: read, the statement is done, so the cursor holds nothing.
                version = self._cursor.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as exc:
                raise _store_error(exc, self.path) from exc
            if self._no_halt == (version, run_id, agent):
                return None
            halt = super().active_halt(run_id, agent)
            self._no_halt = None if halt is not None else (version, run_id, agent)
            return halt

    def set_halt(
        self, scope: HaltScope, target: str, *, reason: str, by: str, ahead: bool = False
    ) -> Halt:
        with self._lock:
            self._no_halt = None
            return super().set_halt(scope, target, reason=reason, by=by, ahead=ahead)

    @contextmanager
    def _reading(self) -> Iterator[Tx]:
        """Reads outside a transaction, each statement in its own snapshot."""
        with self._lock:
            try:
                yield Tx(self._db, SQLITE)
            except sqlite3.Error as exc:
                raise _store_error(exc, self.path) from exc

    def close(self) -> None:
        with self._lock:
            if self._group is not None:
                self._group.close()
            self._db.close()
            if self._whole:
                checked.stamp(self._whole)
                self._whole = ""


class _Transaction:
    """``SQLiteStore._tx``, written out as a class: a 20-step run enters about thirty
    transactions, and a generator-based context manager costs several times as much to
    enter and leave."""

    __slots__ = ("_changes", "_group", "_store")

    def __init__(self, store: SQLiteStore, durable: bool) -> None:
        self._store = store
        self._group = store._group if durable else None  # what fsyncs after the commit
        self._changes = 0

    def __enter__(self) -> Tx:
        store = self._store
        store._lock.acquire()
        try:
            store._cursor.execute("BEGIN IMMEDIATE")
            self._changes = store._db.total_changes
        except BaseException as exc:
            store._lock.release()
            if isinstance(exc, sqlite3.Error):
                raise _store_error(exc, store.path) from exc
            raise
        return Tx(store._cursor, SQLITE)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        store, group, ticket = self._store, self._group, 0
        try:
            if exc is None:
                try:
                    store._cursor.execute("COMMIT")
                except BaseException as failed:
                    exc = failed
                else:
                    # Only a commit that wrote, as ``FULL`` syncs only a commit with frames.
                    if group is not None and store._db.total_changes != self._changes:
                        ticket = group.committed()
                    return
            # A failed COMMIT (EIO on fsync, a full disk) can leave the transaction open;
            # roll back so the connection is usable and nothing half-done stays.
            with suppress(sqlite3.Error):
                store._cursor.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                raise _store_error(exc, store.path) from exc
            if exc is not None and kind is None:
                raise exc  # the COMMIT's own failure
        finally:
            store._lock.release()
            if group is not None and ticket:  # outside the lock: others commit meanwhile
                store._sync_wal(group, ticket)
