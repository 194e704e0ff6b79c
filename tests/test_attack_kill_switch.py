"""An attack on the kill switch's promise that no effect's intent commits after the halt
committed: agents in three processes write effects as fast as they can while a person's
halt lands among them from a fourth. Whatever the interleaving, the steps recorded when
the halt command returned are all there ever are, every one of them was called once, and
the journal holds no intent after the halt (its order is the order of the commits: one
writer on SQLite; on PostgreSQL an intent holds the switch's lock from before its record).
"""

from __future__ import annotations

import time
from pathlib import Path

import oncelog

from .support import oncelog_cli
from .test_halts import finish, looper, sent

AGENTS = 3
ENOUGH = 5  # effects each agent has made before the halt: all of them are in full flow


def test_no_intent_commits_after_the_halt_committed(store_url: str, tmp_path: Path) -> None:
    runs = [f"r{n}" for n in range(AGENTS)]
    markers = {run: tmp_path / f"markers-{run}" for run in runs}
    agents = [looper(store_url, markers[run], run_id=run, count=1_000_000) for run in runs]
    try:
        deadline = time.monotonic() + 60
        while min(len(sent(m)) for m in markers.values()) < ENOUGH:
            assert time.monotonic() < deadline, "the agents never got going"
            assert all(agent.poll() is None for agent in agents)
            time.sleep(0.01)
        oncelog_cli(store_url, "halt", "--global", "--reason", "stop now", "--by", "oncall")
        with oncelog.open(store_url) as ledger:
            at_halt = {run: len(ledger.steps(run)) for run in runs}
        ended = [finish(agent) for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
            agent.communicate()
    assert all(code == oncelog.EXIT_HALTED for code, _ in ended), ended
    with oncelog.open(store_url) as ledger:
        for run in runs:
            steps = ledger.steps(run)
            assert len(steps) == at_halt[run], f"{run}: an intent committed after the halt"
            # the effect in flight when the halt came was still called and recorded
            assert {s.state for s in steps} == {oncelog.StepState.DONE}
            assert sorted(sent(markers[run])) == sorted(s.key for s in steps)
        journal = list(ledger.iter_journal())
        assert ledger.verify().ok
    [halt] = [e.id for e in journal if e.event == "halt_set"]
    late = [(e.run_id, e.seq) for e in journal if e.event == "intent" and e.id > halt]
    assert late == [], "intents journalled after the halt"
