"""Attacks on an agent through its ledger file: the file truncated to nothing, or a page
in its middle overwritten. An agent process (``race_agents/racer.py``, whose tool appends
to a marker file: the provider's own record) started on it refuses before it writes
anything or calls the provider, and the file is left exactly as it was.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

import oncelog
from oncelog.stores import _sqlite

from .support.launch import python, run_python
from .test_race import AGENT, marker_lines

PAGE = 4096  # SQLite's default page size, which the ledger keeps


def agent(db: Path, run_id: str, marker: Path) -> subprocess.CompletedProcess[str]:
    return run_python(AGENT, db, run_id, "--kind", "payment", "--marker", marker)


def fingerprint(db: Path) -> tuple[str, list[str]]:
    """The file's bytes, and what lies beside it (a WAL would hold writes not yet in it)."""
    beside = sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name))
    return hashlib.sha256(db.read_bytes()).hexdigest(), beside


def test_a_ledger_truncated_to_nothing_runs_no_effect_again(tmp_path: Path) -> None:
    db, marker = tmp_path / "ledger.db", tmp_path / "marker"
    first = agent(db, "r", marker)
    assert first.returncode == 0, first.stderr
    os.truncate(db, 0)  # a restore that failed, a copy cut short, a `> ledger.db`
    before = fingerprint(db)
    again = agent(db, "r", marker)
    assert len(marker_lines(marker)) == 1, "the provider was called again"
    assert again.returncode != 0
    assert "LedgerNotFound" in again.stderr, again.stderr
    assert "zero bytes" in again.stderr
    assert fingerprint(db) == before


def note(text: str, *, idempotency_key: str) -> dict[str, str]:
    return {"note": text}


@pytest.mark.parametrize("times_put_back", [False, True], ids=["stray-write", "times-put-back"])
def test_a_ledger_with_a_damaged_page_is_refused_before_any_write(
    tmp_path: Path, times_put_back: bool
) -> None:
    """The ledger was closed whole by oncelog (which stamps it, so an unchanged file is
    not read through again at the next open); the damage comes after, and a writer that
    puts the file's modification time back still changes its change time."""
    db, marker = tmp_path / "ledger.db", tmp_path / "marker"
    with oncelog.open(str(db), durability="process") as ledger:
        upsert = ledger.tool(kind=oncelog.Kind.UPSERT, name="note")(note)
        for r in range(40):
            with ledger.run(f"old-{r}") as run:
                for i in range(10):
                    run.effect(f"s{i}", upsert, "x" * 200)
    pages = db.stat().st_size // PAGE
    assert pages > 20, "the ledger is large enough to have a middle"
    left = db.stat()
    with db.open("r+b") as f:  # a page in the middle: a bad sector, a stray write
        f.seek(pages // 2 * PAGE)
        f.write(b"\xff" * PAGE)
    if times_put_back:
        os.utime(db, ns=(left.st_atime_ns, left.st_mtime_ns))
    before = fingerprint(db)
    started = agent(db, "new", marker)
    assert marker_lines(marker) == [], "the agent called the provider"
    assert started.returncode != 0
    assert "CorruptRecord" in started.stderr, started.stderr
    assert "nothing was written" in started.stderr
    assert fingerprint(db) == before, "the agent wrote to the damaged ledger"


def test_a_kill_while_the_ledger_is_created_leaves_nothing_to_refuse(tmp_path: Path) -> None:
    """A new ledger is made beside its path and linked into place: a process killed just
    before the link leaves no file there (SQLite, creating in place, would leave an empty
    one, which every later open refuses). The next agent creates the ledger and runs."""
    db, marker = tmp_path / "ledger.db", tmp_path / "marker"
    killed = run_python(
        "-c",
        "import os, signal, oncelog; "
        "os.link = lambda *_: os.kill(os.getpid(), signal.SIGKILL); "
        f"oncelog.open({str(db)!r})",
    )
    assert killed.returncode == -9, killed.stderr
    assert not db.exists()
    started = agent(db, "r", marker)
    assert started.returncode == 0, started.stderr
    assert len(marker_lines(marker)) == 1


def test_a_ledger_left_whole_is_not_read_through_again_unless_something_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[str] = []
    check = _sqlite._refuse_damaged

    def counted(db: sqlite3.Connection, path: str) -> None:
        checks.append(path)
        check(db, path)

    monkeypatch.setattr(_sqlite, "_refuse_damaged", counted)
    db = str(tmp_path / "ledger.db")
    oncelog.open(db).close()  # created: the first open of the file checks it
    oncelog.open(db).close()
    assert len(checks) == 1
    oncelog.open(db).close()  # left whole by the last close: not read through
    assert len(checks) == 1
    with oncelog.open(db) as first, oncelog.open(db) as second:  # a WAL beside it: checked
        assert len(checks) == 2
        assert first.runs() == second.runs() == []
    oncelog.open(db).close()  # the last of the two closed it whole
    assert len(checks) == 2
    with open(db, "r+b") as f:  # any write by another program (the same bytes): checked
        header = f.read(16)
        f.seek(0)
        f.write(header)
    oncelog.open(db).close()
    assert len(checks) == 3


KILLED_MID_RUN = (
    "import os, signal, sys, oncelog\n"
    "ledger = oncelog.open(sys.argv[1], durability='process')\n"
    "note = ledger.tool(kind=oncelog.Kind.UPSERT, name='note')("
    "lambda text, *, idempotency_key: {'note': text})\n"
    "with ledger.run('killed') as run:\n"
    "    for i in range(int(sys.argv[2])):\n"
    "        run.effect(f's{i}', note, 'x' * 200)\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
)


def counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    checks: list[str] = []
    check = _sqlite._refuse_damaged

    def counted(db: sqlite3.Connection, path: str) -> None:
        checks.append(path)
        check(db, path)

    monkeypatch.setattr(_sqlite, "_refuse_damaged", counted)
    return checks


def test_a_restart_after_a_kill_leaves_the_check_to_sqlite_s_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed with the ledger open leaves its WAL and its mark: the restart
    does not read the file through (SQLite replays the WAL), and finds every step the
    killed process recorded. Its own close leaves the file stamped whole again."""
    db = tmp_path / "ledger.db"
    oncelog.open(str(db)).close()
    killed = run_python("-c", KILLED_MID_RUN, db, "30")
    assert killed.returncode == -9, killed.stderr
    assert (tmp_path / "ledger.db-wal").exists(), "the kill left the WAL"
    checks = counted_checks(monkeypatch)
    with oncelog.open(str(db)) as ledger:
        assert checks == []
        assert len(ledger.steps("killed")) == 30
    oncelog.open(str(db)).close()
    assert checks == []


def test_a_ledger_open_in_a_live_process_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark of a process that still runs is no crash: the file is checked in full, as
    any file with a WAL beside it that another process has open; and so it is after that
    process is killed, once another has opened and closed the file beside it."""
    db = tmp_path / "ledger.db"
    oncelog.open(str(db)).close()
    holder = subprocess.Popen(
        python("-c", f"import oncelog, sys, time\nl = oncelog.open({str(db)!r})\n"
               "print('open', flush=True)\ntime.sleep(60)"),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "open\n"
        checks = counted_checks(monkeypatch)
        oncelog.open(str(db)).close()
        assert len(checks) == 1
    finally:
        holder.kill()
        holder.communicate()
    # The holder was killed, but its mark is gone (this process's replaced it, and this
    # close took that away): nothing says who found the file whole last, so it is checked.
    assert (tmp_path / "ledger.db-wal").exists()
    oncelog.open(str(db)).close()
    assert len(checks) == 2


def test_a_mark_left_by_a_killed_process_with_no_wal_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mark without a WAL is not what a crash leaves (the WAL was removed, or the file
    replaced since): checked in full, and a damaged page refused."""
    db = tmp_path / "ledger.db"
    with oncelog.open(str(db), durability="process") as ledger:
        upsert = ledger.tool(kind=oncelog.Kind.UPSERT, name="note")(note)
        for r in range(40):
            with ledger.run(f"old-{r}") as run:
                for i in range(10):
                    run.effect(f"s{i}", upsert, "x" * 200)
    killed = run_python("-c", KILLED_MID_RUN, db, "1")
    assert killed.returncode == -9, killed.stderr
    pages = db.stat().st_size // PAGE
    folded = sqlite3.connect(db)  # the WAL folded in and removed, by anything
    folded.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    folded.close()
    assert not Path(f"{db}-wal").exists()
    with db.open("r+b") as f:
        f.seek(pages // 2 * PAGE)
        f.write(b"\xff" * PAGE)
    checks = counted_checks(monkeypatch)
    with pytest.raises(oncelog.CorruptRecord):
        oncelog.open(str(db))
    assert len(checks) == 1
