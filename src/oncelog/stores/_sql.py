"""One SQL for both stores: statements are written once, with ``?`` placeholders and the
``NOW`` and ``TODAY`` tokens, and a ``Dialect`` turns them into SQLite's or PostgreSQL's.

Where the two differ in more than spelling, the dialect says so: PostgreSQL serializes
writers with row locks (``FOR UPDATE``) and advisory locks where SQLite has its single
writer, so every lock a statement or a function takes is a no-op on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._exceptions import ConfigurationError

# Tokens in statements, replaced by the dialect's clock (Unix seconds): lease expiry and
# budgets are judged by the store's clock, never by a worker's.
NOW = "@now"
TODAY = "@today"  # midnight UTC today by the same clock: agents' daily budgets count from it


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Executes(Protocol):
    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...


class Dialect:
    """What differs between the SQL stores' databases. (A plain class: a frozen dataclass
    costs the opening of a ledger its generated methods' compilation.)"""

    __slots__ = (
        "_cache", "for_update", "halts_lock", "journal_lock", "json_field",
        "name", "notify_decision", "now", "placeholder", "skip_locked", "today",
        "unique_violation",
    )  # fmt: skip

    def __init__(
        self,
        *,
        name: str,
        now: str,
        today: str,
        placeholder: str,
        for_update: str,
        skip_locked: str,
        json_field: Callable[[str, str], str],
        unique_violation: tuple[type[BaseException], ...],
        halts_lock: tuple[str, str] | None = None,
        journal_lock: str | None = None,
        notify_decision: str | None = None,
    ) -> None:
        self.name = name
        self.now = now
        self.today = today
        self.placeholder = placeholder
        self.for_update = for_update  # appended to a SELECT that must lock the rows it reads
        self.skip_locked = skip_locked  # the same, passing over rows another has locked
        self.json_field = json_field  # a TEXT column's JSON field, as text
        self.unique_violation = unique_violation
        # Advisory locks (PostgreSQL): (statement, fixed params) taking the halts lock
        # shared or exclusive, and a run's journal lock; None where the single writer
        # already serializes.
        self.halts_lock = halts_lock
        self.journal_lock = journal_lock
        # Wakes the processes waiting for a person's decision (PostgreSQL NOTIFY, sent at
        # the commit); None where waiters poll.
        self.notify_decision = notify_decision
        self._cache: dict[str, str] = {}

    def translate(self, sql: str) -> str:
        """``sql`` in this dialect (cached: statements are a fixed set of strings)."""
        done = self._cache.get(sql)
        if done is None:
            done = sql.replace(TODAY, self.today).replace(NOW, self.now)
            if self.placeholder != "?":
                done = done.replace("%", "%%").replace("?", self.placeholder)
            self._cache[sql] = done
        return done

    def json_text(self, column: str, key: str) -> str:
        return self.json_field(column, key)


class Tx:
    """A cursor or connection in a transaction (or a read), speaking through a dialect."""

    __slots__ = ("dialect", "raw")

    def __init__(self, raw: Executes, dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect

    def execute(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Cursor:
        try:
            result: Cursor = self.raw.execute(self.dialect.translate(sql), params)
        except UnicodeEncodeError as exc:
            # A lone surrogate in a value the API did not check: refused, and the
            # transaction it was part of rolls back whole.
            raise ConfigurationError(
                f"a value holds {exc.object[exc.start : exc.end]!r}, which UTF-8 cannot store"
            ) from None
        return result

    def lock_halts(self, *, exclusive: bool) -> None:
        """Intents take it shared, setting or clearing a halt exclusive, so an intent
        either saw a halt or committed before it."""
        if self.dialect.halts_lock is not None:
            self.raw.execute(self.dialect.halts_lock[0 if exclusive else 1])

    def lock_journal(self, run_id: str) -> None:
        """Held from an append to the commit, so a run's journal ids follow commit order
        and each append reads the hash the previous commit left."""
        if self.dialect.journal_lock is not None:
            self.raw.execute(self.dialect.journal_lock, (run_id,))

    def announce_decision(self, run_id: str) -> None:
        """Tell the processes listening that a person decided something for ``run_id``
        ('' for every run or an agent's): delivered only if the transaction commits."""
        if self.dialect.notify_decision is not None:
            self.raw.execute(self.dialect.notify_decision, (run_id,))


def json_field(column: str, key: str) -> str:
    """``column``'s JSON field ``key`` as text, where ``->>`` reads a TEXT column."""
    return f"({column} ->> '{key}')"


def in_list(values: tuple[Any, ...] | list[Any]) -> str:
    """``(?, ?, ...)`` for ``values``; a list that matches nothing when it is empty."""
    return "(" + ", ".join("?" * len(values)) + ")" if values else "(NULL)"
