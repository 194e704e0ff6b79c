"""The journal as evidence: a hash chain, signed checkpoints, ``verify`` and ``export``.

Tampering is done the way an intruder with the database file would: with sqlite3, after
dropping the append-only triggers. ``verify`` must name each alteration.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

import oncelog
from oncelog.audit._verify import Report, read_checkpoints, verify
from oncelog.records._chain import GENESIS, link, link_rule_1

from .support.launch import python
from .support.operator_commands import oncelog_cli

SPENDER = Path(__file__).parent / "budget_agents" / "spender.py"


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    out = subprocess.run(
        python("-m", "oncelog", "keys", "new", "--dir", str(tmp_path / "keys")),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    private, public = sorted((tmp_path / "keys").iterdir(), key=lambda p: p.suffix)
    assert (private.suffix, public.suffix) == (".key", ".pub"), out.stdout
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    return private, public


def fill(ledger: oncelog.Ledger, runs: int = 3) -> None:
    @ledger.tool(kind="create", name="send")
    def send(n: int, *, idempotency_key: str) -> int:
        return n

    for r in range(runs):
        with ledger.run(f"r{r}") as run:
            for n in range(4):
                run.effect(f"s{n}", send, n)
    ledger.halt("drill", by="ops", agent="billing", ahead=True)  # outside any run chain too


@contextmanager
def intruder(db_path: str) -> Iterator[sqlite3.Connection]:
    """Write access to the file, the triggers out of the way."""
    with closing(sqlite3.connect(db_path, isolation_level=None)) as db:
        for trigger in ("journal_no_update", "journal_no_delete", "checkpoints_no_delete",
                        "checkpoints_no_update"):  # fmt: skip
            db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        yield db


def check(db_path: str, public: Path | None = None, against: Path | None = None) -> Report:
    with oncelog.open(db_path) as ledger:
        return verify(
            ledger.store,
            public_keys=[public] if public else [],
            against=read_checkpoints(against) if against else [],
        )


def kinds(report: Report) -> list[str]:
    return [problem.kind for problem in report.problems]


def test_an_untouched_journal_verifies_on_both_stores(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        fill(ledger)
        report = verify(ledger.store)
    assert report.ok, report.problems
    assert (report.records, report.runs) > (20, 3)


def test_the_journal_refuses_updates_and_deletes(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        fill(ledger, runs=1)
    statements = ("UPDATE journal SET data = '{}'", "DELETE FROM journal")
    if store_url.startswith("postgresql"):
        import psycopg

        for statement in (*statements, "TRUNCATE journal"):
            with (
                psycopg.connect(store_url) as db,
                pytest.raises(psycopg.Error, match="append-only"),
            ):
                db.execute(statement)
        return
    with closing(sqlite3.connect(store_url)) as db:
        for statement in statements:
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                db.execute(statement)


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (
            "UPDATE journal SET data = replace(data, '3', '4') WHERE id = "
            "(SELECT MAX(id) FROM journal WHERE run_id = 'r1' AND event = 'outcome')",
            "broken_link",
        ),
        (
            "DELETE FROM journal WHERE id = (SELECT MIN(id) + 3 FROM journal WHERE run_id = 'r1')",
            "broken_link",
        ),
        (
            "INSERT INTO journal (id, run_id, seq, event, data, at, hash) SELECT id + 1000, "
            "run_id, seq, event, data, at, hash FROM journal WHERE run_id = 'r0' LIMIT 1",
            "broken_link",
        ),
        ("UPDATE journal SET at = at + 1 WHERE id = (SELECT MIN(id) FROM journal)", "broken_link"),
        ("UPDATE journal SET hash = NULL WHERE id = (SELECT MAX(id) FROM journal)", "unchained"),
        (
            "UPDATE journal SET run_id = 'r2' WHERE id = "
            "(SELECT MAX(id) FROM journal WHERE run_id = 'r1')",
            "broken_link",
        ),
    ],
    ids=["edited", "deleted", "inserted", "retimed", "unhashed", "moved"],
)
def test_verify_names_each_alteration(db_path: str, tamper: str, expected: str) -> None:
    with oncelog.open(db_path) as ledger:
        fill(ledger)
    with intruder(db_path) as db:
        db.execute(tamper)
    report = check(db_path)
    assert expected in kinds(report), report.problems
    assert all(p.record_id is not None for p in report.problems if p.kind == expected)


def test_swapped_records_are_found(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:
        fill(ledger)
    with intruder(db_path) as db:
        (a, a_data), (b, b_data) = db.execute(
            "SELECT id, data FROM journal WHERE run_id = 'r0' AND event = 'outcome' LIMIT 2"
        ).fetchall()
        db.execute("UPDATE journal SET data = ? WHERE id = ?", (b_data, a))
        db.execute("UPDATE journal SET data = ? WHERE id = ?", (a_data, b))
    report = check(db_path)
    assert [p.record_id for p in report.problems if p.kind == "broken_link"] == [a, b]
    assert kinds(report).count("state") == 2, "and the two steps disagree with the journal"


def rewrite_chain(db: sqlite3.Connection, run_id: str, keep: int) -> None:
    """Keep the first ``keep`` records of a run and re-hash them, delete the steps they
    no longer mention and put the run back as its last lease left it: a chain that
    verifies on its own and agrees with the tables, as an intruder who knows the algorithm
    would leave it (``keep`` must end on an outcome)."""
    rows = db.execute(
        "SELECT id, seq, event, data, at FROM journal WHERE run_id = ? ORDER BY id", (run_id,)
    ).fetchall()
    db.execute("DELETE FROM journal WHERE run_id = ? AND id > ?", (run_id, rows[keep - 1][0]))
    kept = {seq for _, seq, _, _, _ in rows[:keep] if seq is not None}
    db.execute(
        f"DELETE FROM steps WHERE run_id = ? AND seq NOT IN ({', '.join('?' * len(kept))})",
        (run_id, *kept),
    )
    (owner,) = [json.loads(data)["owner"] for _, _, event, data, _ in rows[:keep]
                if event == "lease_acquired"][-1:]  # fmt: skip
    db.execute(
        "UPDATE runs SET status = 'running', owner = ?, reason = NULL, stopped_by = NULL "
        "WHERE run_id = ?",
        (owner, run_id),
    )
    prev = GENESIS
    for ident, seq, event, data, at in rows[:keep]:
        prev = link(prev, run_id, seq, event, data, at)
        db.execute("UPDATE journal SET hash = ? WHERE id = ?", (prev, ident))


def test_records_of_the_old_rule_verify_beside_the_new_and_edits_of_either_are_found(
    db_path: str, keys: tuple[Path, Path]
) -> None:
    """A ledger written before rule 2 (its every record hashed over the data quoted, as
    rule 1 did; its checkpoints signed over those heads) keeps verifying, and runs, controls
    and a run's end written after it chain rule 2 records onto rule 1 heads."""
    private, public = keys
    with oncelog.open(db_path, signing_key=private) as ledger:
        fill(ledger)
    with intruder(db_path) as db:  # the ledger as the earlier oncelog wrote it
        heads: dict[str, str] = {}
        for ident, run_id, seq, event, data, at in db.execute(
            "SELECT id, run_id, seq, event, data, at FROM journal ORDER BY id"
        ).fetchall():
            heads[run_id] = link_rule_1(heads.get(run_id, GENESIS), run_id, seq, event, data, at)
            db.execute("UPDATE journal SET hash = ? WHERE id = ?", (heads[run_id], ident))
        db.execute("DELETE FROM checkpoints")
    with oncelog.open(db_path, signing_key=private) as ledger:
        for run_id in ("r0", "r1", "r2"):
            assert ledger.checkpoint(run_id) is not None
    assert check(db_path, public).ok
    with oncelog.open(db_path, signing_key=private) as ledger:
        fill(ledger, runs=4)  # r3: a new run; a halt appended to the "" chain's rule 1 head
        ledger.halt("looking", by="ops", run="r1")  # appended to r1's rule 1 chain
    report = check(db_path, public)
    assert report.ok, report.problems
    with intruder(db_path) as db:
        first, last = db.execute(
            "SELECT MIN(id), MAX(id) FROM journal WHERE run_id = 'r1'"
        ).fetchone()
        for ident in (first + 3, last):  # a rule 1 record, then a rule 2 one
            db.execute("UPDATE journal SET data = replace(data, '1', '2') WHERE id = ?", (ident,))
    assert [p.record_id for p in check(db_path, public).problems if p.kind == "broken_link"][
        :2
    ] == [first + 3, last]


def test_a_record_appended_by_another_writer_between_two_of_a_run_keeps_its_chain(
    db_path: str,
) -> None:
    """The hot path links a record after the head this process last wrote; when another
    connection appended to the run in between, the insert's check fails and the record
    follows the real head."""
    with oncelog.open(db_path) as ledger, oncelog.open(db_path) as other:
        send = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
        with ledger.run("r") as run:
            run.effect("a", send, 1)
            other.halt("looking", by="ops", run="r")  # another writer's record in r's chain
            other.clear_halt(by="ops", run="r")
            run.effect("b", send, 2)
    report = check(db_path)
    assert report.ok, report.problems


def test_signed_checkpoints_catch_a_cut_tail_and_a_rewritten_chain(
    db_path: str, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    private, public = keys
    with oncelog.open(db_path, signing_key=private) as ledger:
        fill(ledger)
        assert len(ledger.checkpoints("r1")) == 1  # one at the run's end
    exported = tmp_path / "elsewhere.jsonl"
    exported.write_text(oncelog_cli(db_path, "export"))
    assert check(db_path, public).ok
    with intruder(db_path) as db:
        rewrite_chain(db, "r1", keep=4)  # created, leased, one intent and its outcome
    assert kinds(check(db_path, public)) == ["truncated"]
    with intruder(db_path) as db:
        db.execute("DELETE FROM checkpoints WHERE run_id = 'r1'")  # the evidence beside it
    assert check(db_path, public).ok, "nothing left in the file can tell"
    assert kinds(check(db_path, public, against=exported)) == ["truncated"]


def test_a_forged_or_foreign_signature_is_refused(
    db_path: str, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    private, public = keys
    with oncelog.open(db_path, signing_key=private) as ledger:
        fill(ledger, runs=1)
    with intruder(db_path) as db:
        rewrite_chain(db, "r0", keep=4)
        db.execute("UPDATE checkpoints SET entries = 4, head = (SELECT hash FROM journal "
                   "WHERE run_id = 'r0' ORDER BY id DESC LIMIT 1)")  # fmt: skip
    assert kinds(check(db_path, public)) == ["bad_signature"]
    subprocess.run(
        python("-m", "oncelog", "keys", "new", "--dir", str(tmp_path / "other")),
        capture_output=True, check=True,
    )  # fmt: skip
    (other,) = (tmp_path / "other").glob("*.pub")
    report = check(db_path, other)
    assert kinds(report) == ["bad_signature"]
    assert "not among the public keys" in report.problems[0].message


def test_the_cli_exits_non_zero_and_says_where(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:
        fill(ledger, runs=1)
    assert "ok" in oncelog_cli(db_path, "verify")
    with intruder(db_path) as db:
        db.execute("UPDATE journal SET data = '{}' WHERE id = 4")
    done = subprocess.run(
        python("-m", "oncelog", "verify", "--db", db_path, "--json"),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    problems = json.loads(done.stdout)["problems"]
    assert [(p["kind"], p["record_id"]) for p in problems if p["kind"] != "state"] == [
        ("broken_link", 4)
    ]


def test_an_export_carries_what_the_hash_covers(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:
        fill(ledger, runs=1)
    lines = [json.loads(line) for line in oncelog_cli(db_path, "export").splitlines()]
    prev: dict[str, str] = {}
    for line in lines:
        assert line["type"] == "record"
        expected = link(prev.get(line["run_id"], GENESIS), line["run_id"], line["seq"],
                        line["event"], line["data"], line["at"])  # fmt: skip
        assert line["hash"] == expected
        prev[line["run_id"]] = line["hash"]


@pytest.mark.slow
def test_kills_while_appending_leave_a_valid_chain_that_agrees_with_the_steps(
    db_path: str, tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    private, public = keys
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    argv = python(str(SPENDER), db_path, "r1", str(tmp_path / "m"), "30", "100")
    env = {**os.environ, "ONCELOG_SIGNING_KEY": str(private)}
    for _ in range(15):
        agent = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
        time.sleep(chance.uniform(0.05, 0.5))
        agent.send_signal(signal.SIGKILL)
        agent.communicate(timeout=60)
    final = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
    assert final.returncode == 0, (seed, final.stderr)
    report = check(db_path, public)
    assert report.ok, (seed, report.problems)
    with oncelog.open(db_path) as ledger:
        last_state: dict[int, str] = {}
        for entry in ledger.journal("r1", limit=100_000):
            if entry.event == "intent":
                last_state[entry.seq or 0] = "in_flight"
            elif entry.event in ("outcome", "probed"):
                last_state[entry.seq or 0] = entry.data["state"]
        steps = {s.seq: s.state.value for s in ledger.steps("r1") if s.type.value == "effect"}
    assert {seq: last_state[seq] for seq in steps} == steps, seed


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        (
            "UPDATE steps SET result = '{\"id\":\"ch_forged\"}' WHERE run_id = 'r1' AND seq = 1",
            "other result",
        ),
        ("UPDATE steps SET state = 'not_done' WHERE run_id = 'r1' AND seq = 1", "other state"),
        (
            "UPDATE steps SET args = '{\"args\":[9],\"kwargs\":{}}' WHERE run_id = 'r1' "
            "AND seq = 1",
            "other arguments",
        ),
        ("DELETE FROM steps WHERE run_id = 'r1' AND seq = 1", "deleted"),
        ("UPDATE halts SET cleared_at = 1, cleared_by = 'x'", "cleared behind"),
        ("UPDATE approvals SET status = 'approved', decided_by = 'mallory'", "no such decision"),
    ],
    ids=["result", "state", "arguments", "deleted", "halt", "approval"],
)
def test_tables_edited_behind_the_journal_are_found(store_url: str, tamper: str, says: str) -> None:
    """Replay and the controls read the tables: an edit that bypassed the journal."""
    with oncelog.open(store_url) as ledger:
        fill(ledger)

        @ledger.tool(kind="destructive", name="wipe")
        def wipe(*, idempotency_key: str) -> None: ...

        with pytest.raises(oncelog.ApprovalRequired), ledger.run("w") as run:
            run.effect("w", wipe)
        assert verify(ledger.store).ok
    if store_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(tamper)
    else:
        with closing(sqlite3.connect(store_url)) as lite:
            lite.execute(tamper)
            lite.commit()
    with oncelog.open(store_url) as ledger:
        report = verify(ledger.store)
    assert kinds(report) == ["state"], report.problems
    assert says in report.problems[0].message
