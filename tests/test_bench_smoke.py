"""Each benchmark script runs end to end on a tiny size and prints its table. Smoke only:
benchmarks are never timed assertions; their numbers are in docs/benchmarks.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import require
from .support.launch import python
from .support.postgres import ADMIN_URL, POSTGRES_REASON, postgres_is_up

BENCH = Path(__file__).parents[1] / "bench"


def bench(script: str, *args: str) -> str:
    """Run a script of ``bench/`` (or ``-c`` code) in that folder, where its modules import."""
    argv = python(script, *args) if script == "-c" else python(str(BENCH / script), *args)
    done = subprocess.run(
        argv,
        capture_output=True, text=True, timeout=600, cwd=BENCH,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_budgets_runs(tmp_path: Path) -> None:
    out = bench("budgets.py", "--quick", "--sizes", "10", "30", "--dir", str(tmp_path),
                "--allow-tmpfs")  # fmt: skip
    assert "| 30 |" in out


def test_peers_runs(tmp_path: Path) -> None:
    out = bench("peers.py", "--reps", "1", "--runs", "1", "--dir", str(tmp_path),
                "--allow-tmpfs")  # fmt: skip
    contenders = ("bare loop", "oncelog", "oncelog's statements, raw", "DBOS (SQLite)",
                  "LangGraph (SqliteSaver)")  # fmt: skip
    for contender in contenders:
        assert f"| {contender} |" in out
    # The replay's child compared its replayed run with oncelog's, row by row, or failed.
    assert "its own statements replayed raw" in out


def test_postgres_effect_runs() -> None:
    require(postgres_is_up(), POSTGRES_REASON)
    out = bench("postgres_effect.py", "--reps", "1", "--batch", "20", "--postgres", ADMIN_URL)
    assert "| guarded `run.effect` |" in out
    assert "| floor: INSERT flushed, UPDATE unflushed (2 commits) |" in out
    assert "| both commits flushed (for comparison) |" in out


def test_server_cpu_is_read_from_the_benchmark_s_cluster_only(tmp_path: Path) -> None:
    """Another process named ``postgres`` (another cluster's, or anything so named) is not
    charged to the benchmark; the backend serving it is."""
    require(postgres_is_up(), POSTGRES_REASON)
    impostor = tmp_path / "postgres"
    impostor.symlink_to(sys.executable)
    script = (
        "import subprocess, sys\n"
        "from _workers import postgres\n"
        "from _workers.cpu import cluster_ticks, postmaster_of\n"
        f"other = subprocess.Popen([{str(impostor)!r}, '-c', 'import time; time.sleep(30)'])\n"
        f"with postgres.connect({ADMIN_URL!r}) as conn:\n"
        "    backend = conn.execute('SELECT pg_backend_pid()').fetchone()[0]\n"
        f"    counted = cluster_ticks(postmaster_of({ADMIN_URL!r}))\n"
        "other.kill()\n"
        "print(backend in counted, other.pid in counted)\n"
    )
    assert bench("-c", script).split() == ["True", "False"]


def test_instruction_workloads_run(tmp_path: Path) -> None:
    # Each workload as bench/instructions.py's children run it under callgrind (valgrind
    # itself is not needed here): a replay that called anything would fail.
    for workload in ("effects", "floor_effects", "model_calls", "agent_runs", "empty_runs"):
        bench("instructions.py", "--child", workload, "--units", "2",
              "--db", str(tmp_path / f"{workload}.db"))  # fmt: skip
    for fill, workload in (("fill_effects", "effects_used"), ("fill_floor", "floor_used")):
        used = str(tmp_path / f"{workload}.db")
        bench("instructions.py", "--child", fill, "--units", "2", "--db", used)
        bench("instructions.py", "--child", workload, "--units", "2", "--db", used)
    ledger = str(tmp_path / "replayed.db")
    bench("instructions.py", "--child", "record_for_replay", "--units", "6", "--db", ledger)
    bench("instructions.py", "--child", "replay", "--units", "6", "--db", ledger)


def test_fleet_runs(tmp_path: Path) -> None:
    # One worker process holding N runs, a bare loop and single-run workers, on each
    # store; the benchmark itself checks that every run completed and every effect
    # happened once.
    require(postgres_is_up(), POSTGRES_REASON)
    out = bench("workers.py", "--fleet", "--quick", "--postgres", ADMIN_URL,
                "--dir", str(tmp_path), "--allow-tmpfs")  # fmt: skip
    for store in ("SQLite", "PostgreSQL"):
        assert f"**{store}**" in out
    assert "| 1 x 8 |" in out
    assert "| 4 x 1 |" in out
    assert "| 1 x 1 (tool 0 ms: the reference) |" in out


def test_retention_runs(tmp_path: Path) -> None:
    out = bench("retention.py", "--runs", "20", "--effects", "2", "--batch", "7", "--dir",
                str(tmp_path), "--allow-tmpfs")  # fmt: skip
    assert "vs the floor" in out


def test_record_layouts_runs(tmp_path: Path) -> None:
    out = bench("record_layouts.py", "--quick", "--dir", str(tmp_path))
    for layout in ("floor", "today", "rowid steps", "thin steps", "events", "events + by step"):
        assert f"| {layout} |" in out
    today = next(line for line in out.splitlines() if line.startswith("| today |"))
    for btree in ("steps", "journal", "journal_by_run", "sqlite_autoindex_steps_2"):
        assert f" {btree} " in today


def test_record_layouts_today_is_the_ledger_s(tmp_path: Path) -> None:
    """The bench's ``today`` writes the tables and keys a ledger has: its figures are the
    ledger's until a migration changes them, and then this fails."""
    script = (
        "import sqlite3, oncelog, record_layouts\n"
        f"oncelog.open({str(tmp_path / 'ledger.db')!r}).close()\n"
        "bench = sqlite3.connect(':memory:')\n"
        "bench.executescript(record_layouts.LAYOUTS['today'][0])\n"
        f"ledger = sqlite3.connect({str(tmp_path / 'ledger.db')!r})\n"
        "def shape(db, table):\n"
        "    columns = [(r[1], r[5]) for r in db.execute(f'PRAGMA table_info({table})')]\n"
        "    # Each index's uniqueness, origin and columns; partial ones (approvals) left out.\n"
        "    keys = sorted((u, o, [c[2] for c in db.execute(f'PRAGMA index_info({n!r})')])\n"
        "                  for _, n, u, o, partial in db.execute(f'PRAGMA index_list({table})')\n"
        "                  if not partial)\n"
        "    rowid = db.execute('SELECT sql LIKE \"%WITHOUT ROWID%\" FROM sqlite_schema '\n"
        "                       'WHERE name = ?', (table,)).fetchone()[0]\n"
        "    return columns, keys, rowid\n"
        "for table in ('steps', 'journal'):\n"
        "    print(table, shape(bench, table) == shape(ledger, table))\n"
    )
    assert bench("-c", script).split() == ["steps", "True", "journal", "True"]


def test_gateway_runs(tmp_path: Path) -> None:
    out = bench("gateway.py", "--quick", "--cases", "1x5", "3x5", "--dir", str(tmp_path))
    assert "| 1 | 5 |" in out
    assert "| 3 | 5 |" in out
    assert "through the gateway calls/s" in out


def test_effect_cost_runs() -> None:
    """Both places, both ledger states, every row; callgrind is left to the full run
    (``bench/instructions.py``'s workloads, run above, are the ones it counts)."""
    shm = Path("/dev/shm")
    require(shm.is_dir(), "no /dev/shm (tmpfs) on this machine")
    out = bench("effect_cost.py", "--quick", "--no-instructions")  # under /var/tmp, removed
    for state in ("new", "used"):
        assert f"**A {state} ledger**" in out
    for row in ("wall, mean us", "wall, p50 us", "CPU us", "WAL frames", "bytes stored"):
        assert f"| {row} |" in out
    assert "| disk: oncelog | disk: floor | disk: ratio | tmpfs: oncelog |" in out
    assert out.count("**met**") + out.count("**missed**") >= 4


def test_effect_cost_refuses_a_disk_that_is_tmpfs() -> None:
    shm = Path("/dev/shm")
    require(shm.is_dir(), "no /dev/shm (tmpfs) on this machine")
    done = subprocess.run(
        python(str(BENCH / "effect_cost.py"), "--quick", "--disk", str(shm)),
        capture_output=True, text=True, timeout=120, cwd=BENCH,
    )  # fmt: skip
    assert done.returncode != 0
    assert "pick a folder on a disk" in done.stderr


def test_resume_after_kill_runs(tmp_path: Path) -> None:
    out = bench("resume_after_kill.py", "--steps", "200", "--reps", "1", "--dir", str(tmp_path))
    assert "| this tree | after a kill |" in out
    assert "Target: a resume after a kill within 1.1x a clean one" in out
