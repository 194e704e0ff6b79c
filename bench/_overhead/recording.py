"""Long recorded runs for resume and memory: through the ledger, or inserted in bulk."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .floor import raw_connection
from .workload import TOOL_NAME, EffectInput, open_guarded, step_args

_INSERT_DONE_STEP = (
    "INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, "
    "state, result, error, attempts, tokens_in, tokens_out, started_at, finished_at) "
    "VALUES (?, ?, ?, 'effect', ?, 'create', ?, ?, ?, 'done', ?, NULL, 1, 0, 0, ?, ?)"
)


def record_run(path: Path, run_id: str, steps: int, how: str) -> float:
    """Record ``steps`` done effects in run ``run_id``; return seconds taken.

    ``ledger``: through ``ledger.run`` with durability ``process`` (the real write path).
    ``bulk``: the same rows in one transaction, in the library's encoding, without
    journal entries (replay never reads the journal). Replay checks both: a row
    that differed in key, step, tool or argument hash would raise, and the tool would be
    called."""
    start = time.perf_counter()
    ledger, tool = open_guarded(path, "process")
    if how == "ledger":
        with ledger.run(run_id) as run:
            for i in range(steps):
                run.effect(f"s{i}", tool.tool, **step_args(i))
        ledger.close()
        return time.perf_counter() - start
    with ledger.run(run_id):
        pass  # creates the run row, completed, with no steps
    ledger.close()
    insert_done_steps(path, run_id, steps)
    return time.perf_counter() - start


def insert_done_steps(path: Path, run_id: str, steps: int) -> None:
    db = raw_connection(path, "NORMAL")
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    db.executemany(_INSERT_DONE_STEP, (_done_row(run_id, seq, now) for seq in range(steps)))
    db.execute("COMMIT")
    db.close()


def _done_row(run_id: str, seq: int, now: float) -> tuple[Any, ...]:
    item = EffectInput.make(run_id, seq, prefix="s")
    return (
        run_id,
        seq,
        item.step_id,
        TOOL_NAME,
        item.key,
        item.args_hash,
        item.args_json,
        item.result_json,
        now,
        now,
    )
