"""Recovering without a person, with real processes: the agent (tests/crash_agents) is
SIGKILLed by the provider right after the provider performed an effect, or by this test
at random instants, and started again; the provider (tests/support/provider.py) counts
what really happened, by key."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

import oncelog
from oncelog import StepRecord, StepState

from .support import AgentSetup, read_ledger, run_agent, running_provider

KINDS = ("create", "payment", "create")
DAY = 24 * 3600.0


def kill_after_each_effect(setup: AgentSetup) -> list[int]:
    """Start the agent once per effect, the provider killing it right after performing
    that effect; then once more undisturbed. The exit codes of the restarts."""
    codes = []
    for step in setup.effect_steps:
        exited = run_agent(setup, kill_before_answer=step)
        codes.append(exited.returncode)
        if exited.returncode == oncelog.EXIT_HALTED:
            return codes
    codes.append(run_agent(setup).returncode)
    return codes


def test_a_provider_that_honours_keys_needs_no_person(tmp_path: Path) -> None:
    """Killed after each effect in turn, with the window declared: 0 duplicates, 0 halts."""
    with running_provider(tmp_path / "provider", "honours_keys") as provider:
        setup = AgentSetup(tmp_path / "ledger.db", "run", provider.url, kinds=KINDS,
                           dedupe_window=DAY)  # fmt: skip
        codes = kill_after_each_effect(setup)
        assert codes[:-1] == [-9, -9, -9]
        assert codes[-1] == 0
        counts = provider.counts("run")
        view = read_ledger(setup.ledger, "run")
        assert sorted(counts.values()) == [1, 1, 1]  # each performed once
        assert "unknown" not in view.events  # nobody was asked
        for step in setup.effect_steps:
            record = view.steps[step]
            assert (record.state, record.attempts) == (StepState.DONE, 2)
            assert record.result == provider.first_response("run", record.key)
        replays = [r for r in provider.requests("run") if r.outcome == "replayed"]
        assert len(replays) == 3  # each sent again once, and answered from the first


@pytest.mark.parametrize("position", [1, 2, 3])
def test_a_provider_that_ignores_keys_halts_only_over_the_effect_in_doubt(
    tmp_path: Path, position: int
) -> None:
    """The same kill without the declaration (this provider would not deduplicate): the
    run halts over the one effect in doubt, and nothing is performed twice."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        setup = AgentSetup(tmp_path / "ledger.db", "run", provider.url, kinds=KINDS)
        step = setup.effect_steps[position - 1]
        assert run_agent(setup, kill_before_answer=step).killed
        again = run_agent(setup)
        assert again.returncode == oncelog.EXIT_HALTED, again
        assert sorted(provider.counts("run").values()) == [1] * position
        in_doubt = [s for s, r in read_ledger(setup.ledger, "run").steps.items()
                    if r.state is StepState.UNKNOWN]  # fmt: skip
        assert in_doubt == [step]


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_connection_refused_is_retried_and_attempts_survive_sigkill(tmp_path: Path) -> None:
    tries = tmp_path / "tries"
    setup = AgentSetup(tmp_path / "ledger.db", "run", closed_port(), kinds=("payment",),
                       retry=4, backoff=1.0, tries=tries)  # fmt: skip
    # Killed while it waits for its second attempt (after a refused first one).
    with subprocess.Popen(
        setup.argv(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as agent:
        step = _poll(lambda: _step_in(setup, StepState.NOT_DONE), agent)
        agent.kill()
        agent.communicate()
    assert agent.returncode == -signal.SIGKILL
    assert step.attempts == 1
    assert step.retry_at is not None
    last = run_agent(setup)
    # The agent sees EffectRefused: failed, not halted, and only a person's retry moves
    # it, so it exits 3 as every stop for a person does (a supervisor must not restart it).
    assert last.returncode == 3, last
    assert "EffectRefused" in last.stderr
    view = read_ledger(setup.ledger, "run")
    step = view.steps["effect-1"]
    assert (step.state, step.attempts) == (StepState.FAILED, 4)
    assert step.error is not None
    assert "URLError" in step.error["type"]
    assert len(set(tries.read_text().split())) == 1  # one key for every attempt
    assert len(tries.read_text().split()) == 4  # 1 before the kill, 3 after: not 1 + 4
    assert "unknown" not in view.events


def _step_in(setup: AgentSetup, state: StepState) -> StepRecord | None:
    if not setup.ledger.exists():
        return None
    with oncelog.open(str(setup.ledger)) as ledger:
        steps = [s for s in ledger.steps(setup.run_id) if s.step_id == "effect-1"]
    return steps[0] if steps and steps[0].state is state else None


def _poll(found: Callable[[], StepRecord | None], agent: subprocess.Popen[bytes]) -> StepRecord:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and agent.poll() is None:
        with contextlib.suppress(oncelog.UnknownRun, oncelog.StoreUnavailable):
            record = found()
            if record is not None:
                return record
        time.sleep(0.02)
    raise AssertionError(f"the agent never got there: {agent.poll()}")


def test_a_crash_loop_never_exceeds_the_retry_policy(tmp_path: Path) -> None:
    """50 SIGKILLs at random instants; every attempt is refused: however the kills fall,
    the tool is tried at most ``attempts`` times and nobody is asked."""
    tries, seed = tmp_path / "tries", random.randrange(1 << 30)
    chance = random.Random(seed)
    setup = AgentSetup(tmp_path / "ledger.db", "run", closed_port(), kinds=("payment",),
                       retry=5, backoff=0.2, dedupe_window=DAY, tries=tries)  # fmt: skip
    kills = starts = 0
    window = 1.2  # once the policy is used up a start only replays and exits: kills must
    # land within that shorter life, however fast this machine starts a process
    while kills < 50 and starts < 250:
        starts += 1
        began = time.monotonic()
        exited = run_agent(setup, kill_after=chance.uniform(0.05, window))
        kills += exited.killed
        if not exited.killed:
            window = max(0.06, min(window, time.monotonic() - began))
        # Exit 3 once the policy is used up (EffectRefused), or if a kill fell between the
        # last attempt's intent and its failure: that attempt is truly in doubt.
        assert exited.returncode in (3, -9), (seed, exited)
    assert kills == 50, (seed, kills, starts)
    made = tries.read_text().split() if tries.exists() else []
    step = read_ledger(setup.ledger, "run").steps.get("effect-1")
    attempts = 0 if step is None else step.attempts
    assert len(made) <= attempts <= 5, (seed, len(made), attempts)
    final = run_agent(setup)
    assert final.returncode == 3, (seed, final)
    step = read_ledger(setup.ledger, "run").steps["effect-1"]
    assert step.attempts == 5, seed
    refused = "EffectRefused" in final.stderr
    assert step.state is (StepState.FAILED if refused else StepState.UNKNOWN), (seed, final)
    assert len(tries.read_text().split()) <= 5, seed


def test_a_preflight_that_finds_the_effect_never_calls_the_tool(tmp_path: Path) -> None:
    """The provider already has the effect (another system made it with this key): the
    preflight finds it, the step is recorded done, and no request is sent for it."""
    with running_provider(tmp_path / "provider", "honours_keys") as provider:
        setup = AgentSetup(tmp_path / "ledger.db", "run", provider.url, kinds=KINDS,
                           preflight=True)  # fmt: skip
        key = oncelog.idempotency_key("run", "effect-2", "provider.payment")
        body = json.dumps({"key": key, "run": "run", "payload": {"by": "someone else"}})
        request = urllib.request.Request(provider.url + "/effect", data=body.encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            made_before = json.loads(answer.read())
        done = run_agent(setup)
        assert done.returncode == 0, done
        assert done.results()["effect-2"] == made_before
        assert [r.key for r in provider.requests("run")].count(key) == 1  # only the seed
        assert sorted(provider.counts("run").values()) == [1, 1, 1]
        with oncelog.open(str(setup.ledger)) as ledger:
            step = next(s for s in ledger.steps("run") if s.step_id == "effect-2")
            intent = next(e for e in ledger.journal("run")
                          if e.event == "intent" and e.seq == step.seq)  # fmt: skip
        assert intent.data["reason"] == "the preflight found it at the provider"
