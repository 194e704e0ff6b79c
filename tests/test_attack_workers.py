"""An attack on "workers claim runs in one transaction each; two never claim the same run"
where claims really run side by side: on PostgreSQL, whose transactions do (SQLite's one
writer serialises them; ``test_workers.py`` covers it). Workers race for many short runs;
the provider's own records say which effects happened and how often each was asked for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

from .conftest import require
from .support.postgres import POSTGRES_REASON, fresh_schema, postgres_is_up
from .test_workers import World, ended

WORKERS, RUNS, EFFECTS = 3, 24, 2


@pytest.fixture
def pg_world(tmp_path: Path) -> Iterator[World]:
    require(postgres_is_up(), POSTGRES_REASON)
    provider = tmp_path / "provider"
    provider.mkdir()
    with fresh_schema() as url:
        made = World(url, provider)
        yield made
        made.stop()


def test_racing_workers_on_postgres_claim_each_run_once(pg_world: World) -> None:
    with oncelog.open(pg_world.db_path) as ledger:
        for n in range(RUNS):
            ledger.submit(f"r{n}", {"effects": EFFECTS, "seconds": 0.0})
    workers = [pg_world.start_worker("--until-idle") for _ in range(WORKERS)]
    for worker in workers:
        code, stderr = ended(worker)
        assert code == 0, stderr
    asked = Counter(key for _, key in pg_world.requests())
    assert len(asked) == RUNS * EFFECTS
    assert set(asked.values()) == {1}, "an effect was asked for by two workers"
    assert len(pg_world.performed()) == RUNS * EFFECTS
    with oncelog.open(pg_world.db_path) as ledger:
        runs = ledger.runs()
        assert len(runs) == RUNS
        assert {r.status for r in runs} == {oncelog.RunStatus.COMPLETED}
        owners = {r.run_id: {e.data["owner"] for e in ledger.journal(r.run_id)
                             if e.event == "lease_acquired"} for r in runs}  # fmt: skip
        assert ledger.verify().ok
    assert all(len(o) == 1 for o in owners.values()), "a run was claimed twice"
