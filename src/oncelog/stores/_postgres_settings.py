"""How long a PostgreSQL call may take, and the libpq and server settings that bound it.

One number, the store timeout (``oncelog.open(url, store_timeout=S)``, else the URL's
``oncelog_timeout=S``, else ``DEFAULT_TIMEOUT``), bounds every wait of a store call:

- connecting: libpq's ``connect_timeout`` (whole seconds, at least 2: libpq's floor);
- a dead peer on an idle or busy connection: TCP keepalives and ``tcp_user_timeout``, so
  a partition ends pooled connections instead of leaving them to hang;
- a statement, a lock wait, a session left idle inside a transaction (its process
  stopped while it held a run's row): ``statement_timeout``, ``lock_timeout`` and
  ``idle_in_transaction_session_timeout``, enforced by the server;
- a server that cannot answer at all (stopped, or its answers lost): the client-side
  deadline of ``_postgres_deadline``, the one bound that needs nothing from the server.

Settings the URL names itself are kept: an operator who tuned keepalives knows better.
"""

from __future__ import annotations

import math
from typing import Any

from .._exceptions import ConfigurationError

DEFAULT_TIMEOUT = 10.0
URL_PARAMETER = "oncelog_timeout"  # oncelog's own: taken out before libpq reads the URL
APPLICATION_NAME = "oncelog"


def take_timeout(url: str, timeout: float | None) -> tuple[str, float]:
    """``url`` without ``oncelog_timeout``, and the timeout in force: ``timeout`` if
    given, else the URL's, else the default."""
    from urllib.parse import unquote  # a SQLite ledger, which imports this module, needs none

    base, _, query = url.partition("?")
    kept, named = [], None
    for item in query.split("&") if query else []:
        name, _, value = item.partition("=")
        if unquote(name) == URL_PARAMETER:
            named = unquote(value)
        else:
            kept.append(item)
    stripped = f"{base}?{'&'.join(kept)}" if kept else base
    if timeout is None:
        timeout = DEFAULT_TIMEOUT if named is None else _seconds(named)
    return stripped, checked_timeout(timeout)


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{URL_PARAMETER}={text!r} is not a number of seconds") from None


def checked_timeout(timeout: float) -> float:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ConfigurationError(
            f"the store timeout must be a positive number of seconds, not {timeout!r}"
        )
    return float(timeout)


def connect_options(
    params: dict[str, Any], timeout: float, application_name: str = APPLICATION_NAME
) -> dict[str, Any]:
    """The keyword arguments of every connection, given the URL's own ``params``."""
    defaults = {
        "application_name": application_name,
        "connect_timeout": str(max(2, math.ceil(timeout))),
        "keepalives": "1",
        "keepalives_idle": str(max(1, math.ceil(timeout / 2))),
        "keepalives_interval": str(max(1, math.ceil(timeout / 6))),
        "keepalives_count": "3",
        "tcp_user_timeout": str(math.ceil(timeout * 1000)),
    }
    options: dict[str, Any] = {"autocommit": True}
    options.update({k: v for k, v in defaults.items() if k not in params})
    return options


def session_settings(timeout: float, *, flushed: bool = True) -> str:
    """The statements every new connection runs. ``synchronous_commit`` is set whatever
    the role, database or URL say: ``on`` (``flushed``) makes a commit return only once
    its WAL is flushed, so a committed intent survives a server crash; ``off`` (durability
    ``process``) lets every commit return before. The store turns it off for the single
    transactions that may ride on the next flush (``_postgres.py``).
    ``standard_conforming_strings``: the store's SQL writes backslashes in literals as
    they are (``_postgres_text``). ``extra_float_digits = 1``: a float is written as the
    shortest text that reads back exactly, as Python's repr writes it, which the journal's
    hash is made of on the server (``oncelog_time_text``). ``plan_cache_mode``: the
    transition functions' statements are planned once per session, not again at every
    call (migration 16; a SET clause on the functions did it at a cost per call)."""
    ms = math.ceil(timeout * 1000)
    return (
        f"SET synchronous_commit = {'on' if flushed else 'off'}; "
        "SET standard_conforming_strings = on; SET extra_float_digits = 1; "
        "SET plan_cache_mode = force_generic_plan; "
        f"SET statement_timeout = {ms}; SET lock_timeout = {ms}; "
        f"SET idle_in_transaction_session_timeout = {ms}"
    )
