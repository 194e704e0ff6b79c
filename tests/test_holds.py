"""Holds on a resource (``run.hold``): one holder at a time across runs and processes,
fenced at the provider, lapsing with the holder's lease, blocked while an effect begun
under it is in doubt. The attacks run real agent processes, SIGKILLed and restarted,
against a provider-side log (``hold_agents/fenced_resource.py``) that checks every
action's token: the ledger's word is never the evidence."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

import oncelog

from .hold_agents import fenced_resource
from .support.launch import environment, python

AGENTS = Path(__file__).with_name("hold_agents")
CONTENDER = AGENTS / "contender.py"
RESOURCE = ("host", "db-1")
RUNS = [f"contender-{n}" for n in range(4)]
HOLDS = 5


def start(store_url: str, run_id: str, log: Path) -> subprocess.Popen[str]:
    argv = python(CONTENDER, store_url, run_id, log, "--holds", str(HOLDS), "--lease-ttl", "3")
    return subprocess.Popen(
        argv, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def test_a_hold_contended_by_four_killed_processes_never_has_two_holders_acting(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "resource.log"
    oncelog.open(store_url).close()  # the schema exists before four processes race for it
    chance = random.Random(30)
    agents = {run: start(store_url, run, log) for run in RUNS}
    kills = 0
    try:
        for _ in range(12):  # kills at random moments, each victim restarted at once
            time.sleep(chance.uniform(0.2, 0.6))
            live = [run for run, agent in agents.items() if agent.poll() is None]
            if not live:
                break
            victim = chance.choice(live)
            agents[victim].send_signal(signal.SIGKILL)
            agents[victim].communicate()
            kills += 1
            agents[victim] = start(store_url, victim, log)
        finished: set[str] = set()
        while len(finished) < len(RUNS):
            for run, agent in agents.items():
                if run in finished:
                    continue
                _, err = agent.communicate(timeout=120)
                if agent.returncode == 0:
                    finished.add(run)
                elif agent.returncode == oncelog.EXIT_TRY_LATER:
                    agents[run] = start(store_url, run, log)  # its run was still leased
                else:
                    pytest.fail(f"{run} exited {agent.returncode}: {err}")
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.kill()
            agent.communicate()
    entries = fenced_resource.lines(log)
    assert kills > 0
    assert [e for e in entries if e[0] == "violation"] == []
    tokens = [int(e[1]) for e in entries if e[0] == "begin"]
    assert len(tokens) >= len(RUNS) * HOLDS * 2  # every action done, some again after a kill
    assert tokens == sorted(tokens)  # the provider saw tokens only grow
    with oncelog.open(store_url) as ledger:
        assert [hold.state for hold in ledger.holds()] == ["free"]
        assert ledger.verify().ok


def contender(store_url: str, run_id: str, log: Path, *extra: str) -> int:
    argv = python(CONTENDER, store_url, run_id, log, "--holds", "1", *extra)
    return subprocess.run(argv, env=environment(), capture_output=True, timeout=60).returncode


def test_a_hold_whose_holder_died_with_an_effect_in_doubt_stays_blocked_until_a_person_decides(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "resource.log"
    dies = ("--lease-ttl", "0.5", "--kind", "create", "--die-in-tool")
    assert contender(store_url, "dies", log, *dies) == -signal.SIGKILL
    time.sleep(1.0)  # the dead holder's lease expires by the store's clock
    with oncelog.open(store_url) as ledger:
        [hold] = ledger.holds()
        assert (hold.holder, hold.state) == ("dies", "blocked")
        assert contender(store_url, "second", log, "--wait", "0") == oncelog.EXIT_TRY_LATER
        assert contender(store_url, "second", log, "--wait", "0.3") == oncelog.EXIT_TRY_LATER
        assert [e[0] for e in fenced_resource.lines(log)] == ["begin"]  # only the dead one's
        ledger.resolve("dies", "first-0", "done", by="ann", result=1, attempt=1)
        assert ledger.holds()[0].state == "lapsed"
        assert contender(store_url, "second", log, "--wait", "0") == 0
        [hold] = ledger.holds()
        assert (hold.holder, hold.token, hold.state) == ("second", 2, "free")
    tokens = [int(e[1]) for e in fenced_resource.lines(log) if e[0] == "begin"]
    assert tokens == [1, 2, 2]
