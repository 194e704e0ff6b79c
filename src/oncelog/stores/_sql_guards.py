"""The transition table (``records/_transitions.py``) as SQL: the guards every statement
that changes a step's state is written with, in both stores and in the PostgreSQL server
functions, which ``functions`` renders from ``migrations/postgres/functions.sql``. Rendered
once, when a module is loaded: the statements' texts are constants, as before."""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable

from ..records._records import StepState
from ..records._transitions import IN_DOUBT, TRANSITIONS, Transition


def states(among: Iterable[StepState | None]) -> str:
    """``'a', 'b'``: the states' values as SQL literals, in a fixed order (a new step's
    None, which no row holds, left out)."""
    return ", ".join(f"'{s.value}'" for s in sorted(s for s in among if s is not None))


def leaves(transition: Transition, column: str = "state") -> str:
    """The guard of a write that changes an existing row: ``state = '...'`` for one
    state (as the hot statements were written by hand), else ``state IN (...)``."""
    return _among(column, transition.sources)


def _among(column: str, among: Iterable[StepState | None]) -> str:
    values = states(among)
    return f"{column} = {values}" if "," not in values else f"{column} IN ({values})"


def enters(transition: Transition) -> str:
    """The state literal a write with one target writes: ``'in_flight'``."""
    return f"'{transition.target.value}'"


def in_doubt(column: str = "state") -> str:
    """Whether a step is in doubt (``records/_transitions.IN_DOUBT``)."""
    return _among(column, IN_DOUBT)


_PLACEHOLDER = re.compile(r"\{\{ (\w+)\.(leaves|enters) \}\}")
FUNCTIONS_FILE = os.path.join(os.path.dirname(__file__), "migrations", "postgres", "functions.sql")


def _fill(match: re.Match[str]) -> str:
    transition = TRANSITIONS[match.group(1)]
    return leaves(transition) if match.group(2) == "leaves" else enters(transition)


def functions() -> str:
    """The PostgreSQL server functions, their guards filled in from the table: each
    ``{{ write.leaves }}`` (``leaves``: the states it may leave) and ``{{ write.enters }}``
    (``enters``: the one state it writes), ``write`` a name of ``TRANSITIONS``; last,
    ``oncelog_functions_version()``, which answers ``functions_version()``."""
    return _filled() + (
        "CREATE OR REPLACE FUNCTION oncelog_functions_version() RETURNS text "
        f"LANGUAGE sql IMMUTABLE AS $$ SELECT '{functions_version()}'::text $$;\n"
    )


def functions_version() -> str:
    """A digest of the functions' text: a ledger whose ``oncelog_functions_version()``
    answers another (or none) gets them again at its next open, so a transition changed in
    the table reaches existing ledgers without a numbered migration."""
    return hashlib.sha256(_filled().encode()).hexdigest()[:32]


@functools.cache
def _filled() -> str:
    with open(FUNCTIONS_FILE, encoding="utf-8") as text:
        return _PLACEHOLDER.sub(_fill, text.read())
