"""A new ledger is never silent: a replica started where its ledger's relative path
names another file makes a new, empty ledger, and would run every effect again without a
word. It cannot be told apart from a first start, so it is not refused (docs/kubernetes.md
says how to pin one ledger); the first run in a process that created its ledger warns,
naming the file, and a run under ``run_main`` logs the ledger it uses."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import oncelog
from oncelog.process import _main as main

from .support.launch import run_python

LOOPER = Path(__file__).parent / "halt_agents" / "looper.py"


def start(folder: Path, markers: Path) -> tuple[int, str]:
    """The agent with the relative ledger path ``ledger.db``, started in ``folder``."""
    folder.mkdir(exist_ok=True)
    done = run_python(LOOPER, "ledger.db", "r1", "support", markers, "1", cwd=folder)
    return done.returncode, done.stderr


def test_a_replica_with_another_working_folder_warns_of_its_new_ledger(tmp_path: Path) -> None:
    markers, first, replica = tmp_path / "markers", tmp_path / "a", tmp_path / "b"
    code, stderr = start(first, markers)
    assert code == 0, stderr
    assert f"run r1 starts in a new ledger this process created at {first}/ledger.db" in stderr
    code, stderr = start(first, markers)  # a restart finds its ledger: nothing to say
    assert (code, stderr) == (0, "")
    code, stderr = start(replica, markers)
    assert code == 0, stderr
    assert f"new ledger this process created at {replica}/ledger.db" in stderr
    # The documented limit: the replica's empty ledger sent the email again.
    assert len(markers.read_text().splitlines()) == 2


def test_a_run_under_run_main_logs_the_ledger_it_uses(
    store_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    oncelog.open(store_url).close()
    monkeypatch.setattr(main, "RUNNING", [True])
    caplog.set_level(logging.INFO, logger="oncelog")
    with oncelog.open(store_url) as ledger:
        for run_id in ("r1", "r2"):
            with ledger.run(run_id):
                pass
        where = ledger.store.where
    said = [r.getMessage() for r in caplog.records if "uses the ledger" in r.getMessage()]
    assert said == [f"run r1 uses the ledger at {where}"]


def test_the_first_run_in_a_new_ledger_warns_once_on_both_stores(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="oncelog")
    with oncelog.open(store_url) as ledger:
        for run_id in ("r1", "r2"):
            with ledger.run(run_id):
                pass
        where = ledger.store.where
    with oncelog.open(store_url) as ledger, ledger.run("r3"):
        pass
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "new ledger" in r.getMessage()]
    assert said == [
        (logging.INFO, f"created a new ledger at {where}"),
        (logging.WARNING, said[1][1]),
    ]
    assert said[1][1].startswith(f"run r1 starts in a new ledger this process created at {where}")
