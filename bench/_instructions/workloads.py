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
# Inputs built for this many effects in every child whatever its units, before anything
# is measured: the building is in both totals alike and cancels out of their difference.
INPUTS = WARM + 400
FILL = 2000  # effects a used ledger (or the floor's used table) holds before the count


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


def _inputs(run_id: str, units: int) -> list[Any]:
    """The effects' inputs, the floor's and oncelog's alike (``_overhead.workload``: the
    same step ids, keyword arguments, key, argument and result JSON), built for
    ``INPUTS`` effects whatever ``units`` is."""
    from _overhead.workload import EffectInput

    if WARM + units > INPUTS:
        raise SystemExit(f"at most {INPUTS - WARM} units: inputs are built for that many")
    return [EffectInput.make(run_id, n) for n in range(INPUTS)]


def _effects_of(db: Path, units: int, run_id: str) -> None:
    """``units`` effects in one run, durability ``intent``: the floor's arguments (``to``,
    ``subject``, ``body``), a tool that returns the floor's result, already built."""
    import json

    items = _inputs(run_id, units)
    results = [json.loads(item.result_json) for item in items]
    with _open(db) as ledger:

        def send_email(to: str, subject: str, body: str, *, idempotency_key: str) -> Any:
            CALLS[0] += 1
            return results[CALLS[0] - 1]

        tool = ledger.tool(kind="create", name="send_email")(send_email)
        with ledger.run(run_id) as run:
            for item in items[: WARM + units]:
                run.effect(item.step_id, tool, **item.kwargs)


def effects(db: Path, units: int) -> None:
    """``units`` effects in one run of a new ledger, durability ``intent``."""
    _effects_of(db, units, "effects")


def effects_used(db: Path, units: int) -> None:
    """The same in a ledger that ``fill_effects`` left holding ``FILL`` effects."""
    _effects_of(db, units, "effects")


def fill_effects(db: Path, units: int) -> None:
    """Not measured: a used ledger, ``FILL`` effects of another run (``units`` unused)."""
    from _overhead.workload import EffectInput

    with _open(db) as ledger:
        tool = ledger.tool(kind="create", name="send_email")(
            lambda to, subject, body, *, idempotency_key: {"id": idempotency_key[-16:]}
        )
        with ledger.run("old") as run:
            for n in range(FILL):
                item = EffectInput.make("old", n)
                run.effect(item.step_id, tool, **item.kwargs)


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
    INSERT committed and fsynced, an UPDATE committed (``bench/_overhead/floor.py``), of
    the inputs oncelog's effects get, built before the first."""
    from _overhead.floor import Floor

    items = _inputs("effects", units)
    floor = Floor(db, "INTENT")
    for item in items[: WARM + units]:
        floor.effect(item)
    floor.close()


def floor_used(db: Path, units: int) -> None:
    """The same on the table ``fill_floor`` left holding ``FILL`` rows."""
    floor_effects(db, units)


def fill_floor(db: Path, units: int) -> None:
    """Not measured: the floor's used table, ``FILL`` rows (``units`` unused)."""
    from _overhead.floor import Floor
    from _overhead.workload import EffectInput

    floor = Floor(db, "NORMAL")
    for n in range(FILL):
        floor.effect(EffectInput.make("old", n))
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
    "effects_used": effects_used,
    "fill_effects": fill_effects,
    "floor_effects": floor_effects,
    "floor_used": floor_used,
    "fill_floor": fill_floor,
    "model_calls": model_calls,
    "agent_runs": agent_runs,
    "empty_runs": empty_runs,
    "record_for_replay": record_for_replay,
    "replay": replay,
}
