"""A careless operator: commands pointed where there is no ledger create nothing there.

Every command that only reads (or decides on what is recorded) refuses a place without a
ledger, with a message and exit 2: a missing file (and its missing folders), a zero-byte
file, another program's SQLite database, an empty PostgreSQL schema. Afterwards the place
is exactly as it was: no folder, no file, no WAL, no table. ``oncelog.open(create=False)``
is the same for the library. A folder the ledger cannot be created in is
``StoreUnavailable`` (exit 75), not a traceback.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli

from .conftest import require
from .support.launch import PYTHON, python
from .support.postgres import (
    POSTGRES_REASON,
    execute,
    fresh_schema,
    postgres_is_up,
    schema_url,
)

READ_ONLY = [
    ["runs"],
    ["show", "r1"],
    ["unknown"],
    ["approvals"],
    ["halts"],
    ["verify"],
    ["export"],
    ["budgets", "r1"],
    ["resolve", "r1", "mail", "not_done", "--by", "alice"],
    ["approve", "r1", "mail", "--by", "alice"],
    ["deny", "r1", "mail", "--by", "alice"],
    ["resume", "--global", "--by", "alice"],
    ["metrics", "--port", "0"],
    ["console", "--port", "0", "--token-file", "/nonexistent/oncelog-token"],
    ["ship", "--to", "file:/nonexistent/sink", "--state", "/nonexistent/state", "--once"],
]
IDS = [" ".join(argv[:2]) for argv in READ_ONLY]


def invoke(argv: list[str], db: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*argv, "--db", db])
    return result.exit_code, result.output


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("argv", READ_ONLY, ids=IDS)
def test_a_missing_ledger_is_refused_and_nothing_is_created(
    argv: list[str], tmp_path: Path
) -> None:
    before = files_under(tmp_path)
    code, out = invoke(argv, str(tmp_path / "typo" / "deeper" / "ledger.db"))
    assert code == 2, out
    assert "no ledger at" in out
    assert "does not exist" in out
    assert "Traceback" not in out
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("argv", READ_ONLY, ids=IDS)
def test_a_zero_byte_file_is_not_a_ledger(argv: list[str], tmp_path: Path) -> None:
    empty = tmp_path / "ledger.db"
    empty.touch()
    code, out = invoke(argv, f"sqlite:///{empty}")
    assert code == 2, out
    assert "holds no oncelog ledger" in out
    assert files_under(tmp_path) == ["ledger.db"]  # no -wal, no -shm
    assert empty.stat().st_size == 0


def test_another_programs_database_is_left_untouched(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.commit()
    before = other.read_bytes()
    code, out = invoke(["unknown"], str(other))
    assert code == 2, out
    assert "holds no oncelog ledger" in out
    assert other.read_bytes() == before  # not switched to WAL, no table added
    assert files_under(tmp_path) == ["app.db"]


def test_the_default_place_is_not_created_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ONCELOG_URL", raising=False)
    result = CliRunner().invoke(cli, ["unknown"])
    assert result.exit_code == 2, result.output
    assert "no ledger at .oncelog/ledger.db" in result.output
    assert files_under(tmp_path) == []


def test_an_existing_ledger_is_read_as_before(db_path: str) -> None:
    oncelog.open(db_path).close()
    code, out = invoke(["unknown"], db_path)
    assert (code, out) == (0, "no effects in doubt\n")
    code, out = invoke(["verify"], db_path)
    assert code == 0, out


def test_open_existing_only(tmp_path: Path) -> None:
    path = str(tmp_path / "sub" / "ledger.db")
    with pytest.raises(oncelog.LedgerNotFound) as missing:
        oncelog.open(path, create=False)
    assert isinstance(missing.value, oncelog.ConfigurationError)
    assert type(pickle.loads(pickle.dumps(missing.value))) is oncelog.LedgerNotFound
    assert files_under(tmp_path) == []
    with oncelog.open(path) as created, created.run("r"):
        pass
    with oncelog.open(path, create=False) as existing:
        assert [r.run_id for r in existing.runs()] == ["r"]


@pytest.fixture
def empty_schema() -> Iterator[str]:
    require(postgres_is_up(), POSTGRES_REASON)
    with fresh_schema() as url:
        yield url


def tables_in(url: str) -> list[str]:
    schema = url.split("search_path%3D", 1)[1].split("&", 1)[0]
    rows = execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
    )
    return sorted(row[0] for row in rows)


@pytest.mark.parametrize("argv", READ_ONLY, ids=IDS)
def test_an_empty_postgres_schema_gets_no_tables(argv: list[str], empty_schema: str) -> None:
    code, out = invoke(argv, empty_schema)
    assert code == 2, out
    assert "no ledger at postgresql://" in out
    assert tables_in(empty_schema) == []


def test_open_existing_only_on_postgres(empty_schema: str) -> None:
    with pytest.raises(oncelog.LedgerNotFound):
        oncelog.open(empty_schema, create=False)
    with pytest.raises(oncelog.LedgerNotFound, match="no schema"):
        oncelog.open(schema_url("oncelog_test_no_such_schema"), create=False)
    assert tables_in(empty_schema) == []
    oncelog.open(empty_schema).close()
    with oncelog.open(empty_schema, create=False) as existing:
        assert existing.runs() == []


# -- a folder the ledger cannot be created in ---------------------------------------------

NOBODY = 65534


def run_as_someone_without_write_access(
    argv: list[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``cwd``, made read-only; as root (who may write anywhere), as nobody."""
    cwd.chmod(0o555)
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        require(setpriv is not None, "setpriv (util-linux), to drop root's rights")
        argv = [str(setpriv), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_URL"}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


OPEN_DEFAULT = (
    "import oncelog\n"
    "try:\n"
    "    oncelog.open()\n"
    "except oncelog.StoreUnavailable as exc:\n"
    "    print(type(exc).__name__, exc.exit_code, exc)\n"
)


@pytest.fixture
def reachable_folder() -> Iterator[Path]:
    """A folder anyone can reach (pytest's own are root's only, when run as root)."""
    with tempfile.TemporaryDirectory(prefix="oncelog-ro-") as name:
        Path(name).chmod(0o755)
        yield Path(name) / "work"


@pytest.mark.parametrize("made", ["nothing", "the .oncelog folder"])
def test_a_read_only_folder_is_store_unavailable(reachable_folder: Path, made: str) -> None:
    folder = reachable_folder
    folder.mkdir()
    if made != "nothing":
        (folder / ".oncelog").mkdir()
        (folder / ".oncelog").chmod(0o555)
    try:
        opened = run_as_someone_without_write_access(python("-c", OPEN_DEFAULT), folder)
        assert opened.returncode == 0, opened.stderr
        assert opened.stdout.startswith("StoreUnavailable 75 "), opened.stdout
        assert ".oncelog/ledger.db" in opened.stdout
        assert "Permission denied" in opened.stdout or "write to its folder" in opened.stdout
        halted = run_as_someone_without_write_access(
            python("-m", "oncelog", "halt", "--global", "--reason", "x", "--by", "a"),
            folder,
        )
        # A kill switch never creates a ledger: it says where it looked for one.
        assert halted.returncode == oncelog.LedgerNotFound.exit_code, halted.stderr
        assert halted.stderr.startswith("Error: no ledger at "), halted.stderr
        assert "Traceback" not in halted.stderr
    finally:
        for path in (folder, folder / ".oncelog"):
            if path.exists():
                path.chmod(0o755)
    assert files_under(folder) == ([] if made == "nothing" else [".oncelog"])


def test_a_shipper_started_first_waits_for_the_ledger_and_creates_nothing(
    tmp_path: Path,
) -> None:
    """A sidecar may start before the agents that create the ledger."""
    db = tmp_path / "later" / "ledger.db"
    ship = [
        PYTHON, "-m", "oncelog", "ship", "--db", str(db), "--to",
        f"file:{tmp_path / 'sink.jsonl'}", "--state", str(tmp_path / "state"), "--poll", "0.02",
    ]  # fmt: skip
    shipper = subprocess.Popen(ship, stderr=subprocess.PIPE, text=True)
    try:
        assert shipper.stderr is not None
        assert shipper.stderr.readline().startswith("waiting for the ledger: no ledger at")
        assert files_under(tmp_path) == []
        with oncelog.open(str(db)) as ledger, ledger.run("r"):
            pass
        deadline = time.monotonic() + 60
        while not (tmp_path / "sink.jsonl").exists():  # the shipper found it and shipped
            assert time.monotonic() < deadline, "the shipper never shipped"
            time.sleep(0.02)
    finally:
        shipper.terminate()
        shipper.communicate(timeout=60)
