"""Attacks on a run's lease when its owner is stopped (SIGSTOP) inside its tool: several
processes race to take the run over once the lease expires, by the store's clock, and the
stopped owner wakes up afterwards. One taker at a time, each with a new fencing token;
the effect is called again only as its kind allows, and never by two takers; the woken
owner writes nothing.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import oncelog

from .test_race import agents, marker_lines

TAKERS = 3


def test_racing_takers_of_a_stopped_owners_run_call_the_upsert_once(
    store_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    common = ("r", "--kind", "upsert", "--marker", str(marker), "--lease-ttl", "1")
    with agents(tmp_path, store_url) as start:
        owner = start(*common, "--stop-in", "tool")
        owner.wait_until_stopped()
        takers = [start(*common, "--retry-leased", "30") for _ in range(TAKERS)]
        ended = [taker.end() for taker in takers]
        os.kill(owner.pid, signal.SIGCONT)
        woken = owner.end()
    assert woken.code == oncelog.EXIT_TRY_LATER, woken.stderr
    assert "LeaseLost" in woken.stderr
    assert [e.code for e in ended] == [0] * TAKERS, [e.stderr for e in ended]
    callers = [e.report["pid"] for e in ended if e.report is not None and e.report["called"]]
    assert len(callers) == 1, "exactly one taker called the upsert again"
    key = oncelog.idempotency_key("r", "charge", "append_marker")
    assert marker_lines(marker) == [f"{owner.pid} {key}", f"{callers[0]} {key}"]
    with oncelog.open(store_url) as ledger:
        charge = ledger.steps("r")[-1]
        journal = ledger.journal("r", limit=10_000)
        assert ledger.verify().ok
    assert (charge.state, charge.attempts) == (oncelog.StepState.DONE, 2)
    assert charge.result == {"pid": callers[0], "note": "hello"}
    tokens = [e.data["token"] for e in journal if e.event == "lease_acquired"]
    assert tokens == sorted(set(tokens)), "every taking of the run has a new token"


def test_a_decision_after_the_stopped_owners_lease_expired_is_not_written_over(
    store_url: str, tmp_path: Path
) -> None:
    """Nobody took the run over: a person decides once the stopped owner's lease has
    expired by the store's clock (refused until then). The owner, woken, is inside the
    tool; its heartbeat and its outcome must not take the run back from the decision."""
    marker = tmp_path / "marker"
    common = ("r", "--kind", "payment", "--marker", str(marker), "--lease-ttl", "1")
    with agents(tmp_path, store_url) as start:
        owner = start(*common, "--stop-in", "tool")
        owner.wait_until_stopped()
        deadline = time.monotonic() + 60
        with oncelog.open(store_url) as ledger:
            while True:
                try:
                    ledger.resolve("r", "charge", "done", by="alice", result={"id": "ch_1"})
                    break
                except oncelog.RunLeased:
                    assert time.monotonic() < deadline, "the lease never expired"
                    time.sleep(0.05)
        os.kill(owner.pid, signal.SIGCONT)
        woken = owner.end()
        assert woken.code == oncelog.EXIT_TRY_LATER, (woken.code, woken.stderr)
        assert "LeaseLost" in woken.stderr
        with oncelog.open(store_url) as ledger:
            charge = ledger.steps("r")[-1]
            assert (charge.state, charge.result) == (oncelog.StepState.DONE, {"id": "ch_1"})
            assert ledger.verify().ok
        last = start(*common).end()
    assert last.code == 0, last.stderr
    assert last.report is not None
    assert (last.report["result"], last.report["called"]) == ({"id": "ch_1"}, False)
    key = oncelog.idempotency_key("r", "charge", "append_marker")
    assert marker_lines(marker) == [f"{owner.pid} {key}"]
