"""Power loss, simulated: the agent runs under an LD_PRELOAD shim that snapshots each
ledger file at every fsync, and the ledger is then rebuilt from those snapshots alone —
the disk after a power cut at that instant — and resumed (``support/power_loss.py``).

With ``durability="intent"`` an outcome commits without its own fsync and becomes durable
with the next intent's; these tests check the promise of docs/guarantees.md on both sides
of that boundary: a process kill loses nothing (the OS has the commit), a power cut loses
at most that outcome, which comes back in doubt and is settled by a probe or a person,
never run again blindly; nothing that was synced is lost.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

import oncelog
from oncelog import RunStatus, StepState

from .conftest import require
from .support.power_loss import PowerSetup, build_shim

KILLED = -9


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("gcc") is not None, "gcc builds the fsync-recording shim")
    return build_shim(tmp_path_factory.mktemp("shim"))


def states(ledger: Path) -> dict[str, StepState]:
    with oncelog.open(str(ledger), durability="full") as opened:
        return {s.step_id: s.state for s in opened.steps("power")}


def assert_each_key_called_once(setup: PowerSetup) -> None:
    counts = Counter(setup.calls())
    assert len(counts) == setup.effects, counts
    assert set(counts.values()) == {1}, counts


def test_an_outcome_committed_without_fsync_survives_a_process_kill(
    shim: Path, tmp_path: Path
) -> None:
    setup = PowerSetup(shim, tmp_path, "intent")
    assert setup.run(crash_at="after_outcome_commit@effect-2") == KILLED
    # The outcome reached the OS but not the disk: the copy cut back to the last fsync
    # still has the effect in flight, the files themselves have it done.
    assert states(setup.cut_back(tmp_path / "power-cut"))["effect-2"] is StepState.IN_FLIGHT
    assert states(setup.ledger)["effect-2"] is StepState.DONE
    assert setup.run() == 0
    assert_each_key_called_once(setup)


@pytest.mark.parametrize("probe", [True, False], ids=["probe", "no-probe"])
def test_a_power_cut_after_an_unsynced_outcome_leaves_the_effect_in_doubt(
    shim: Path, tmp_path: Path, probe: bool
) -> None:
    setup = PowerSetup(shim, tmp_path, "intent", probe=probe)
    assert setup.run(crash_at="after_outcome_commit@effect-2") == KILLED
    copy = setup.cut_back(tmp_path / "power-cut")
    # Nothing synced is lost: effect-1's outcome rode on effect-2's intent fsync.
    synced = states(copy)
    assert synced == {"think": StepState.DONE, "effect-1": StepState.DONE,
                      "effect-2": StepState.IN_FLIGHT}  # fmt: skip
    code = setup.run(ledger=copy)
    if probe:  # the provider has the key: recorded done, not called again
        assert code == 0
        assert_each_key_called_once(setup)
    else:  # a create in doubt waits for a person
        assert code == 3
        assert sorted(Counter(setup.calls()).values()) == [1, 1]
        assert states(copy)["effect-2"] is StepState.UNKNOWN
        with oncelog.open(str(copy)) as ledger:
            assert ledger.get_run("power").status is RunStatus.HALTED


def test_a_power_cut_before_an_intent_commit_finds_every_earlier_outcome(
    shim: Path, tmp_path: Path
) -> None:
    setup = PowerSetup(shim, tmp_path, "intent", effects=4)
    assert setup.run(crash_at="after_intent_commit@effect-4") == KILLED
    copy = setup.cut_back(tmp_path / "power-cut")
    assert states(copy) == {
        "think": StepState.DONE, **{f"effect-{n}": StepState.DONE for n in (1, 2, 3)},
        "effect-4": StepState.IN_FLIGHT,
    }  # fmt: skip
    assert setup.calls() == [setup.calls()[n] for n in range(3)]  # effect-4 never called


def test_a_power_cut_before_the_first_intent_loses_the_run_start_with_its_model_call(
    shim: Path, tmp_path: Path
) -> None:
    """The run's start and lease ride on the first intent's fsync: cut before it, the
    disk holds no run at all; resumed, the model is asked again and each effect is called
    once."""
    setup = PowerSetup(shim, tmp_path, "intent")
    setup.create()
    assert setup.run(crash_at="before_intent_commit@effect-1") == KILLED
    assert setup.calls() == []
    copy = setup.cut_back(tmp_path / "power-cut")
    with oncelog.open(str(copy)) as ledger:
        assert ledger.runs() == []
    assert setup.run(ledger=copy) == 0
    assert_each_key_called_once(setup)


def test_the_first_intent_fsync_makes_the_run_start_durable(shim: Path, tmp_path: Path) -> None:
    setup = PowerSetup(shim, tmp_path, "intent")
    setup.create()
    assert setup.run(crash_at="after_intent_commit@effect-1") == KILLED
    copy = setup.cut_back(tmp_path / "power-cut")
    assert states(copy) == {"think": StepState.DONE, "effect-1": StepState.IN_FLIGHT}
    with oncelog.open(str(copy)) as ledger:
        assert ledger.get_run("power").fencing_token == 1


def test_a_power_cut_after_the_run_ends_finds_it_completed(shim: Path, tmp_path: Path) -> None:
    setup = PowerSetup(shim, tmp_path, "intent", effects=2)
    setup.create()
    # A second connection keeps the WAL: the agent's close then neither checkpoints it into
    # the database nor deletes it, so the run's end is on disk only if it was fsynced.
    with closing(sqlite3.connect(setup.ledger)) as reader:
        reader.execute("SELECT COUNT(*) FROM runs").fetchone()
        assert setup.run() == 0
        copy = setup.cut_back(tmp_path / "power-cut")
    with oncelog.open(str(copy)) as ledger:
        assert ledger.get_run("power").status is RunStatus.COMPLETED
    assert set(states(copy).values()) == {StepState.DONE}


def test_durability_full_syncs_the_outcome_too(shim: Path, tmp_path: Path) -> None:
    setup = PowerSetup(shim, tmp_path, "full")
    assert setup.run(crash_at="after_outcome_commit@effect-2") == KILLED
    assert states(setup.cut_back(tmp_path / "power-cut"))["effect-2"] is StepState.DONE


@pytest.mark.parametrize(("durability", "per_effect"), [("intent", 1), ("full", 2)])
def test_fsyncs_per_effect(shim: Path, tmp_path: Path, durability: str, per_effect: int) -> None:
    """Ten more effects cost exactly ten more WAL fsyncs (``full``: twenty); nothing else
    in the run's commits depends on how many effects it has."""
    counted = {}
    for effects in (5, 15):
        setup = PowerSetup(shim, tmp_path / str(effects), durability, effects=effects)
        setup.folder.mkdir()
        assert setup.run() == 0
        counted[effects] = setup.syncs().count("ledger.db-wal")
    assert counted[15] - counted[5] == 10 * per_effect, counted


@pytest.mark.parametrize(("durability", "extra"), [("intent", 1), ("full", 3)])
def test_fsyncs_per_run(shim: Path, tmp_path: Path, durability: str, extra: int) -> None:
    """Beyond the effects' own, a run costs one WAL fsync with ``intent``, its end's (its
    start and its model call ride on the first intent's), three with ``full`` (its start,
    the model call, its end), plus the one SQLite makes of a new WAL's header before its
    first frames. A second connection keeps the WAL, so the agent's close does not
    checkpoint it."""
    setup = PowerSetup(shim, tmp_path, durability)
    setup.create()
    before = setup.syncs().count("ledger.db-wal")
    with closing(sqlite3.connect(setup.ledger)) as reader:
        reader.execute("SELECT COUNT(*) FROM runs").fetchone()
        assert setup.run() == 0
    per_effect = 1 if durability == "intent" else 2
    assert setup.syncs().count("ledger.db-wal") - before == 1 + 3 * per_effect + extra
