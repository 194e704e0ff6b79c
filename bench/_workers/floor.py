"""Each store's floor: one durable commit of one row of the size a step row has, on a bare
connection, one writer, nothing else. An effect needs at least two (intent, outcome)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _overhead.floor import raw_connection

from . import postgres
from .agent import BODY

WARM_UP = 20  # commits made before the clock starts
COLUMNS = "run_id, step_id, key, args_hash, args, state, result, started_at"
TABLE = (
    "CREATE TABLE floor (id INTEGER PRIMARY KEY, run_id TEXT, step_id TEXT, key TEXT, "
    "args_hash TEXT, args TEXT, state TEXT, result TEXT, started_at DOUBLE PRECISION)"
)
PG_TABLE = TABLE.replace("INTEGER PRIMARY KEY", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")


def row(n: int) -> tuple[Any, ...]:
    # The arguments the workers' tool gets (``agent.send_email``), ``wait_ms`` included.
    args = {"to": "alice@example.com", "subject": f"ticket {n} resolved", "body": BODY,
            "wait_ms": 0.0}  # fmt: skip
    key = f"{n:064x}"
    result = {"id": "msg_" + key[-16:], "to": args["to"], "status": "queued"}
    return (
        "floor", f"email-{n}", key, key, json.dumps({"args": [], "kwargs": args}), "in_flight",
        json.dumps(result), time.time(),
    )  # fmt: skip


def timed(commit: Callable[[tuple[Any, ...]], None], commits: int) -> list[int]:
    """Nanoseconds of each of ``commits`` commits, after a warm-up."""
    rows = [row(n) for n in range(WARM_UP + commits)]
    out: list[int] = []
    clock = time.perf_counter_ns
    for n, values in enumerate(rows):
        start = clock()
        commit(values)
        if n >= WARM_UP:
            out.append(clock() - start)
    return out


def sqlite_floor(url: str, commits: int) -> list[int]:
    """The ledger's SQLite settings (WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``)."""
    db = raw_connection(Path(url), "FULL")
    db.execute(TABLE)
    insert = f"INSERT INTO floor ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

    def commit(values: tuple[Any, ...]) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute(insert, values)
        db.execute("COMMIT")

    try:
        return timed(commit, commits)
    finally:
        db.close()


def postgres_floor(url: str, commits: int) -> list[int]:
    """``synchronous_commit = on`` (as the store sets it): COMMIT waits for the WAL flush."""
    with postgres.connect(url) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute(PG_TABLE)
        conn.autocommit = False
        insert = f"INSERT INTO floor ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"

        def commit(values: tuple[Any, ...]) -> None:
            conn.execute(insert, values)
            conn.commit()

        return timed(commit, commits)
