"""Attacks on "a store that does not answer never makes a call wait without limit" where
the store is a SQLite file and what does not answer is another writer: a process that
took the write lock and was then stopped (SIGSTOP). Every call ends within the store
timeout with ``StoreUnavailable`` (exit 75), with the consequences of a failed commit: the
tool is not called, or, once it was, its effect is in doubt and never called again
without a person.

And the same promise when the store cannot be used at start: the tutorial's agent opens
its ledger under ``run_main`` (not at import), so that it exits 75 then too.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import oncelog

from .support.flaky_agent import FLAKY, flaky, tries_made
from .support.launch import environment, python
from .test_docs import run_agent, tutorial_blocks

TIMEOUT = ("--store-timeout", "1")
BOUND = 45.0  # far above the 1 s timeout: only a wait without limit goes past it

LOCKER = """
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


@contextmanager
def stopped_writer(db_path: str) -> Iterator[None]:
    """A process holding the ledger's write lock, stopped; ended (and so the lock) after."""
    locker = subprocess.Popen(python("-c", LOCKER, db_path), stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None
        assert locker.stdout.readline() == "locked\n"
        yield
    finally:
        locker.kill()
        locker.communicate(timeout=60)


def test_a_stopped_writer_at_start_ends_the_agent_within_the_timeout(
    db_path: str, tmp_path: Path
) -> None:
    tries = tmp_path / "tries"
    oncelog.open(db_path).close()  # the ledger exists; its write lock is what is held
    with stopped_writer(db_path):
        began = time.monotonic()
        code, out = flaky(db_path, tries, *TIMEOUT)
        took = time.monotonic() - began
    assert code == oncelog.EXIT_TRY_LATER, out
    assert "StoreUnavailable" in out
    assert took < BOUND
    assert tries_made(tries) == []
    code, out = flaky(db_path, tries)
    assert code == 0, out
    assert len(tries_made(tries)) == 1


def test_a_writer_stopped_while_the_tool_runs_leaves_the_effect_in_doubt(
    db_path: str, tmp_path: Path
) -> None:
    """The intent is committed and the tool is inside the provider when another process
    takes the write lock and stops: the outcome cannot be written, the agent exits 75
    within the timeout, and the payment, which happened, halts for a person."""
    tries, hold = tmp_path / "tries", tmp_path / "hold"
    agent = subprocess.Popen(python(FLAKY, db_path, "r", tries, *TIMEOUT, "--hold", hold),
                             env=environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not tries_made(tries):
            assert time.monotonic() < deadline, "the agent never entered its tool"
            assert agent.poll() is None, agent.communicate()
            time.sleep(0.01)
        with stopped_writer(db_path):
            hold.touch()
            out, _ = agent.communicate(timeout=BOUND)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    assert agent.returncode == oncelog.EXIT_TRY_LATER, out
    assert "StoreUnavailable" in out
    for _ in range(2):
        code, out = flaky(db_path, tries)
        assert code == oncelog.EXIT_HALTED, out
        assert "AmbiguousOutcome" in out
    assert len(tries_made(tries)) == 1
    with oncelog.open(db_path) as ledger:
        [charge] = ledger.steps("r")
        assert (charge.state, charge.attempts) == (oncelog.StepState.UNKNOWN, 1)
        assert ledger.verify().ok


def test_the_tutorial_agent_exits_75_when_its_store_cannot_be_used_at_start(
    tmp_path: Path,
) -> None:
    [(_, agent), *_] = tutorial_blocks()
    (tmp_path / "refund_agent.py").write_text(agent)
    (tmp_path / "not-a-folder").write_text("")
    unusable = os.fspath(tmp_path / "not-a-folder" / "ledger.db")
    done = run_agent(tmp_path, "ticket-4711", ONCELOG_URL=unusable)
    assert "StoreUnavailable" in done.stderr
    assert done.returncode == oncelog.EXIT_TRY_LATER, done.stderr
