"""What a child process of ``bench/instructions.py`` does ``units`` times, through the
public API only, so an older tree of oncelog (first on ``PYTHONPATH``) runs it unchanged.

Each workload does its fixed part (import, open, a warm-up that prepares every statement)
whatever ``units`` is; the parent runs it for two numbers of units and divides the
difference of the two totals by the units between them, so the fixed part cancels out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

WARM = 5  # steps or runs before the measured ones, in both children alike
CALLS = [0]  # how many times a tool or model ran in this process


def _model() -> dict[str, Any]:
    CALLS[0] += 1
    return {"choices": [{"message": {"content": "thought"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}  # fmt: skip


def _effect(idempotency_key: str = "") -> dict[str, Any]:
    CALLS[0] += 1
    return {"id": "e1", "key": idempotency_key}


def _open(db: Path) -> Any:
    """The ledger, closed by each workload before it exits: a ledger left open leaves
    SQLite's cleanup at exit to chance, a few ten thousand instructions either way."""
    import oncelog

    return oncelog.open(str(db))


def effects(db: Path, units: int) -> None:
    """``units`` effects in one run, durability ``intent``."""
    with _open(db) as ledger:
        tool = ledger.tool(kind="create", name="create_thing")(_effect)
        with ledger.run("effects") as run:
            for i in range(WARM + units):
                run.effect(f"e{i}", tool)


def model_calls(db: Path, units: int) -> None:
    """``units`` model calls in one run."""
    with _open(db) as ledger, ledger.run("model calls") as run:
        for i in range(WARM + units):
            run.llm(f"m{i}", _model)


def agent_runs(db: Path, units: int) -> None:
    """``units`` runs of the peers' 20-step agent (12 model calls, 8 effects)."""
    from _peers.agents import Marks, oncelog_agent

    run = oncelog_agent(db, Marks("warm", None))
    for i in range(WARM + units):
        run(f"agent {i}")


def floor_effects(db: Path, units: int) -> None:
    """``units`` effects of the floor of durability ``intent`` on a raw connection: an
    INSERT committed and fsynced, an UPDATE committed (``bench/_overhead/floor.py``)."""
    from _overhead.floor import Floor
    from _overhead.workload import EffectInput

    floor = Floor(db, "INTENT")
    for n in range(WARM + units):
        floor.effect(EffectInput.make("floor", n))
    floor.close()


def empty_runs(db: Path, units: int) -> None:
    """``units`` runs of no step: a run's start (its row, its lease) and its end."""
    with _open(db) as ledger:
        for i in range(WARM + units):
            with ledger.run(f"empty {i}"):
                pass


def _replayed_run(db: Path, units: int) -> None:
    """A run of ``units`` steps, half effects, half model calls."""
    with _open(db) as ledger:
        tool = ledger.tool(kind="create", name="create_thing")(_effect)
        with ledger.run("replayed") as run:
            for i in range(units):
                if i % 2:
                    run.effect(f"s{i}", tool)
                else:
                    run.llm(f"s{i}", _model)


def record_for_replay(db: Path, units: int) -> None:
    """Not measured: the run ``replay`` enters again."""
    _replayed_run(db, units)


def replay(db: Path, units: int) -> None:
    """The run ``record_for_replay`` left, entered again: every step returned from the
    ledger, nothing called."""
    _replayed_run(db, units)
    if CALLS[0]:
        raise AssertionError(f"a replay called a tool or a model {CALLS[0]} times")


WORKLOADS: dict[str, Callable[[Path, int], None]] = {
    "effects": effects,
    "floor_effects": floor_effects,
    "model_calls": model_calls,
    "agent_runs": agent_runs,
    "empty_runs": empty_runs,
    "record_for_replay": record_for_replay,
    "replay": replay,
}
