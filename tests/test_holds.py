"""Holds on a resource (``run.hold``): one holder at a time across runs and processes,
fenced at the provider, lapsing with the holder's lease, blocked while an effect begun
under it is in doubt. The attacks run real agent processes, SIGKILLed and restarted,
against a provider-side log (``hold_agents/fenced_resource.py``) that checks every
action's token: the ledger's word is never the evidence."""

from __future__ import annotations

import json
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
        # Only a person (or the holder's restart) frees it: exit 3, not "try again later".
        assert contender(store_url, "second", log, "--wait", "0") == oncelog.EXIT_HALTED
        assert contender(store_url, "second", log, "--wait", "0.3") == oncelog.EXIT_HALTED
        assert [e[0] for e in fenced_resource.lines(log)] == ["begin"]  # only the dead one's
        ledger.resolve("dies", "first-0", "done", by="ann", result=1, attempt=1)
        assert ledger.holds()[0].state == "lapsed"
        assert contender(store_url, "second", log, "--wait", "0") == 0
        [hold] = ledger.holds()
        assert (hold.holder, hold.token, hold.state) == ("second", 2, "free")
        assert ledger.verify().ok, ledger.verify().problems
    tokens = [int(e[1]) for e in fenced_resource.lines(log) if e[0] == "begin"]
    assert tokens == [1, 2, 2]


def test_a_hold_released_at_the_end_of_its_block_is_free_at_once(ledger: oncelog.Ledger) -> None:
    with ledger.run("first") as run, run.hold(RESOURCE) as hold:
        assert hold.token == 1
    with ledger.run("second") as run, run.hold(RESOURCE) as hold:
        assert hold.token == 2
    assert [(h.holder, h.state) for h in ledger.holds()] == [("second", "free")]


def test_a_nested_hold_is_the_same_hold_and_its_inner_end_keeps_it(
    ledger: oncelog.Ledger,
) -> None:
    @ledger.tool(kind="upsert")
    def act(*, hold_token: int) -> int:
        return hold_token

    with ledger.run("outer") as run, run.hold(RESOURCE) as outer:
        with run.hold(list(RESOURCE)) as inner:
            assert inner.token == outer.token == run.effect("in", act)
        with ledger.run("other") as other, pytest.raises(oncelog.ResourceHeld) as held:
            other.hold(RESOURCE).__enter__()
        assert held.value.holder == "outer"
        assert run.effect("after", act) == outer.token
    assert ledger.holds()[0].state == "free"


@pytest.mark.parametrize("name", [(), ("host", ["db-1"]), ("x", float("nan")), 7, {"a": 1}])
def test_a_hold_name_that_is_not_json_scalars_is_a_typed_error(
    ledger: oncelog.Ledger, name: object
) -> None:
    with ledger.run("named") as run:
        before = len(ledger.journal("named"))
        with pytest.raises(oncelog.InvalidPayload):
            run.hold(name)
        assert len(ledger.journal("named")) == before
    assert ledger.holds() == []


def test_a_tool_taking_a_hold_token_outside_any_hold_is_refused_before_its_step(
    ledger: oncelog.Ledger,
) -> None:
    @ledger.tool(kind="upsert")
    def act(*, hold_token: int) -> int:
        return hold_token

    with pytest.raises(oncelog.UsageError), ledger.run("unheld") as run:
        run.effect("act", act)
    assert ledger.steps("unheld") == []


def test_an_async_run_holds_with_async_with(ledger: oncelog.Ledger) -> None:
    import asyncio

    async def hold_twice() -> tuple[int, int]:
        async with ledger.run("async") as run, run.hold(RESOURCE) as hold:
            first = hold.token
        async with ledger.run("async-2") as run, run.hold(RESOURCE) as hold:
            return first, hold.token

    assert asyncio.run(hold_twice()) == (1, 2)


def test_a_person_releases_a_hold_only_with_force_while_its_holder_lives(
    store_url: str,
) -> None:
    from click.testing import CliRunner

    from oncelog.cli import cli

    name = '["host","db-1"]'
    ledger = oncelog.open(store_url)
    with ledger.run("live") as run, run.hold(RESOURCE):
        cli_run = CliRunner().invoke
        listed = cli_run(cli, ["holds", "--db", store_url])
        assert "held, run live" in listed.output
        refused = cli_run(cli, ["release", name, "--by", "ann", "--why", "x", "--db", store_url])
        assert refused.exit_code == oncelog.EXIT_TRY_LATER
        forced = [name, "--by", "ann", "--why", "gone", "--force", "--db", store_url]
        assert cli_run(cli, ["release", *forced]).exit_code == 0
        assert ledger.holds()[0].state == "free"
        again = cli_run(cli, ["release", *forced])
        assert again.exit_code == 5  # nobody holds it now
    released = [e.data for e in ledger.journal("live") if e.event == "hold_released"]
    assert ledger.verify().ok, ledger.verify().problems
    ledger.close()
    assert released == [
        {"by": "ann", "forced": True, "resource": name, "state": "held", "token": 1, "why": "gone"}
    ]


def test_the_tutorial_hold_runs_in_its_agent(tmp_path: Path) -> None:
    """docs/tutorial.md, section 7: the hold's fragment added to the tutorial's agent and
    called in place of ``handle``; each run hands its tools the hold's next token."""
    from .test_docs import run_agent, tutorial_blocks

    [(_, agent), *fragments] = tutorial_blocks()
    [holding] = [code for _, code in fragments if "run.hold(" in code]
    main = 'if __name__ == "__main__":'
    agent = agent.replace(main, f"{holding}\n\n{main}")
    agent = agent.replace("lambda: handle(ticket)", 'lambda: rotate_certificate("db-1", ticket)')
    (tmp_path / "refund_agent.py").write_text(agent)
    for run_id in ("rotate-1", "rotate-2", "rotate-2"):  # the last one replays
        done = run_agent(tmp_path, run_id)
        assert done.returncode == 0, done.stderr
    performed = (tmp_path / "outbox/hosts.jsonl").read_text().splitlines()
    assert [(e["do"], e["token"]) for e in map(json.loads, performed)] == [
        ("drain", 1), ("rotate-certificate", 1), ("undrain", 1),
        ("drain", 2), ("rotate-certificate", 2), ("undrain", 2),
    ]  # fmt: skip
