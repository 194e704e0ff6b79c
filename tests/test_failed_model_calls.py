"""A model call or a read that raised records nothing and takes no position (issue 45's
Strands retries): the agent's retry of it is the step at that position, so a run killed
after the retry replays in a new process without ``ReplayDivergence`` and without asking
the model again. Steps taken together (``gather``) keep their positions."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import oncelog

# The agent: a model call and a read, each failing once when told to (a throttled model,
# a query timing out) and retried by the agent's own code; then, when told to, it dies.
AGENT = r"""
import asyncio, os, signal, sys
import oncelog

ledger_path, calls_path, mode, flavour = sys.argv[1:5]

def counted(what):
    with open(calls_path, "a") as calls:
        calls.write(what + "\n")

failed = set()

def model(prompt):
    if mode == "first" and "model" not in failed:
        failed.add("model")
        raise TimeoutError("throttled")
    counted("model")
    return "an answer to " + prompt

def query(n):
    if mode == "first" and "query" not in failed:
        failed.add("query")
        raise ConnectionError("timed out")
    counted("query")
    return n * 2

def retried(step):
    for attempt in range(3):
        try:
            return step()
        except (TimeoutError, ConnectionError):
            continue
    raise AssertionError("no attempt succeeded")

with oncelog.open(ledger_path) as ledger:
    if flavour == "sync":
        with ledger.run("r") as run:
            answer = retried(lambda: run.llm("ask", model, "hi"))
            doubled = retried(lambda: run.read(None, query, 21, name="query"))
            if mode == "first":
                os.kill(os.getpid(), signal.SIGKILL)
    else:
        async def main():
            async with ledger.run("r") as run:
                for attempt in range(3):
                    try:
                        answer = await run.llm("ask", model, "hi")
                        break
                    except TimeoutError:
                        continue
                for attempt in range(3):
                    try:
                        doubled = await run.read(None, query, 21, name="query")
                        break
                    except ConnectionError:
                        continue
                if mode == "first":
                    os.kill(os.getpid(), signal.SIGKILL)
            return answer, doubled
        answer, doubled = asyncio.run(main())
print(answer, doubled)
"""


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_retried_model_call_and_read_replay_after_a_kill(tmp_path: Path, flavour: str) -> None:
    ledger, calls = str(tmp_path / "l.db"), tmp_path / "calls"
    argv = [sys.executable, "-c", AGENT, ledger, str(calls)]
    first = subprocess.run([*argv, "first", flavour], capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    again = subprocess.run([*argv, "again", flavour], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["an", "answer", "to", "hi", "42"]
    assert calls.read_text().split() == ["model", "query"]  # the replay asked nothing live
    with oncelog.open(ledger) as opened:
        steps = [(s.seq, s.step_id) for s in opened.steps("r")]
        assert opened.get_run("r").status is oncelog.RunStatus.COMPLETED
    assert steps == [(0, "ask"), (1, "query@1")]


def test_steps_taken_together_keep_their_positions_when_one_raises(tmp_path: Path) -> None:
    """``gather``: the second call took the position after the first before the first
    raised, so the first's position is not handed out again (the gap stays, as before)."""

    async def main(ledger: oncelog.Ledger) -> list[tuple[int, str]]:
        async def fails() -> str:
            raise TimeoutError("throttled")

        async def answers() -> str:
            await asyncio.sleep(0)
            return "ok"

        async with ledger.run("g") as run:
            got = await asyncio.gather(
                run.llm("a", fails), run.llm("b", answers), return_exceptions=True
            )
            assert isinstance(got[0], TimeoutError)
            await run.llm("c", answers)
        return [(s.seq, s.step_id) for s in ledger.steps("g")]

    with oncelog.open(str(tmp_path / "g.db")) as ledger:
        assert asyncio.run(main(ledger)) == [(1, "b"), (2, "c")]
