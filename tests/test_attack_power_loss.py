"""An attack on the power-loss table's promise that a person's decisions are fsynced
before their commit returns, with the default durability: a kill switch, an approval's
decision, a resolution, a raised budget. Each is made by the CLI under the fsync shim
(``support/power_loss.py``) while another connection keeps the WAL from being folded into
the database, then the power is cut; the agent resumed from what the disk holds must meet
the decision.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

import oncelog

from .conftest import require
from .support.flaky_agent import flaky, tries_made
from .support.launch import run_python
from .support.power_loss import PowerSetup, build_shim

RECORD = '{"id": "ch_1"}'


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("gcc") is not None, "gcc builds the fsync-recording shim")
    return build_shim(tmp_path_factory.mktemp("shim"))


class Machine:
    """One ledger whose every process runs under the shim, and the agent's tries."""

    def __init__(self, shim: Path, folder: Path) -> None:
        self.setup = PowerSetup(shim, folder, "intent")
        self.ledger = str(self.setup.ledger)
        self.tries = folder / "tries"
        self.env = {k: v for k, v in self.setup.env(self.setup.ledger).items()
                    if k.startswith(("LD_PRELOAD", "SYNC_SHIM"))}  # fmt: skip

    def agent(self, *options: str, crash_at: str | None = None) -> int:
        code, out = flaky(self.ledger, self.tries, *options, crash_at=crash_at, **self.env)
        assert code in (0, 3, 4, -signal.SIGKILL), out
        return code

    def person(self, *args: str) -> None:
        run_python("-m", "oncelog", *args, "--db", self.ledger, env={**self.setup.env(
            self.setup.ledger)}, check=True)  # fmt: skip


def halted(machine: Machine) -> tuple[str, ...]:
    machine.person("halt", "--global", "--reason", "incident", "--by", "oncall")
    return ()


def approved(machine: Machine) -> tuple[str, ...]:
    assert machine.agent("--approval") == oncelog.EXIT_WAITING
    machine.person("approve", "r", "charge", "--by", "alice")
    return ("--approval",)


def resolved(machine: Machine) -> tuple[str, ...]:
    assert machine.agent(crash_at="after_call@charge") == -signal.SIGKILL
    assert machine.agent() == oncelog.EXIT_HALTED
    machine.person("resolve", "r", "charge", "done", "--result", RECORD, "--by", "alice")
    return ()


def budget_raised(machine: Machine) -> tuple[str, ...]:
    options = ("--cost", "1", "--budget", "0.5")
    assert machine.agent(*options) == oncelog.EXIT_HALTED
    machine.person("budgets", "r", "--set", "cost=5", "--by", "alice")
    return options


Decision = Callable[[Machine], tuple[str, ...]]


@pytest.mark.parametrize(
    ("decide", "after"),
    [(halted, oncelog.EXIT_HALTED), (approved, 0), (resolved, 0), (budget_raised, 0)],
)
def test_a_power_cut_right_after_a_persons_decision_keeps_it(
    shim: Path, tmp_path: Path, decide: Decision, after: int
) -> None:
    machine = Machine(shim, tmp_path)
    machine.setup.create()
    with closing(sqlite3.connect(machine.ledger)) as reader:
        reader.execute("SELECT COUNT(*) FROM runs").fetchone()
        options = decide(machine)
        copy = machine.setup.cut_back(tmp_path / "power-cut")
    tried = len(tries_made(machine.tries))
    code, out = flaky(str(copy), machine.tries, *options)
    assert code == after, out
    made = tries_made(machine.tries)
    if decide is resolved:
        assert (len(made), out.splitlines()[0]) == (1, RECORD), out
    else:
        assert len(made) == tried + (code == 0)
    with oncelog.open(str(copy)) as ledger:
        assert ledger.verify().ok
