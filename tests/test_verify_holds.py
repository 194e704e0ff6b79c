"""``verify`` against forgeries of the holds table: who holds a resource, with which token,
and whether it was released, are what the ``hold_acquired`` and ``hold_released`` records
say, and a hold's token grows with every taking. Each forgery is plain SQL, as an intruder
with write access to the database would make it, on both stores."""

from __future__ import annotations

import contextvars
import signal
import time
from pathlib import Path

import pytest

import oncelog
from oncelog.audit._signing import new_key_pair

from .test_holds import contender
from .test_verify_forgeries import messages, reports, tamper

DB1, DB2 = ("host", "db-1"), ("host", "db-2")
DB1_ROW, DB2_ROW = '\'["host","db-1"]\'', '\'["host","db-2"]\''


def keep(run: oncelog.Run, name: tuple[str, str]) -> None:
    """Take a hold and never give it up, as a process killed inside its block leaves it
    (in a context of its own: the hold's token is not left to this test's tools)."""
    contextvars.copy_context().run(run.hold(name).__enter__)


def build(url: str, private: Path) -> None:
    """db-1 held and released by two runs in turn; db-2 left by a run that ended inside
    its block, then taken by another (it had lapsed) and left held."""
    with oncelog.open(url, signing_key=private) as ledger:
        for run_id in ("first", "second"):
            with ledger.run(run_id) as run, run.hold(DB1):
                pass
        with ledger.run("keeper") as run:
            keep(run, DB2)
        with ledger.run("taker") as run:
            keep(run, DB2)
        states = {h.resource: (h.holder, h.token, h.state) for h in ledger.holds()}
    assert states == {
        '["host","db-1"]': ("second", 2, "free"),
        '["host","db-2"]': ("taker", 2, "lapsed"),
    }


@pytest.fixture
def built(store_url: str, tmp_path: Path) -> Path:
    """The ledger built at ``store_url``; the public key to check its signatures."""
    private, public = new_key_pair(tmp_path / "keys")
    build(store_url, private)
    return public


def test_untouched_holds_verify_whole_and_by_run(store_url: str, built: Path) -> None:
    for run_id in (None, "first", "second", "keeper", "taker"):
        for report in reports(store_url, built, run_id):
            assert report.ok, (run_id, report.problems)


FORGERIES = {
    "forged holder": (f"UPDATE holds SET holder = 'mallory' WHERE resource = {DB2_ROW}",
                      "other holder"),
    "forged lease": (f"UPDATE holds SET holder_token = holder_token + 1 WHERE resource = {DB2_ROW}",
                     "other holder_token"),
    "lowered token": (f"UPDATE holds SET token = 1 WHERE resource = {DB2_ROW}", "other token"),
    "acquired earlier": (
        f"UPDATE holds SET acquired_at = acquired_at - 3600 WHERE resource = {DB2_ROW}",
        "other acquired_at",
    ),
    "released_at erased": (f"UPDATE holds SET released_at = NULL WHERE resource = {DB1_ROW}",
                           "was released in the journal but is held in the holds table"),
    "released without the journal": (
        f"UPDATE holds SET released_at = 1 WHERE resource = {DB2_ROW}", "other released_at"
    ),
    "deleted row": (f"DELETE FROM holds WHERE resource = {DB1_ROW}",
                    "is in the journal but not in the holds table: its row was deleted"),
    "inserted row": (
        "INSERT INTO holds (resource, holder, holder_token, token, acquired_at, released_at) "
        "VALUES ('[\"host\",\"db-9\"]', 'taker', 1, 7, 1, NULL)",
        "the journal never records it taken",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("tamper_sql", "says"), FORGERIES.values(), ids=FORGERIES.keys())
def test_each_column_of_a_hold_is_held_to_the_journal(
    store_url: str, built: Path, tamper_sql: str, says: str
) -> None:
    tamper(store_url, tamper_sql)
    for report in reports(store_url, built):
        assert {p.kind for p in report.problems} == {"state"}, report.problems
        assert says in messages(report, "state"), report.problems


def test_a_token_lowered_and_then_taken_again_is_found_after_the_row_agrees(
    store_url: str, built: Path
) -> None:
    """The next holder of a row whose token was lowered is handed a token a provider has
    seen already; its row then matches its record, but the records' tokens went back."""
    tamper(store_url, f"UPDATE holds SET token = 0 WHERE resource = {DB1_ROW}")
    with oncelog.open(store_url) as ledger, ledger.run("third") as run, run.hold(DB1) as hold:
        assert hold.token == 1
    for report in reports(store_url, built):
        [problem] = report.problems
        assert problem.run_id == "third"
        assert 'the hold on ["host","db-1"] was taken with token 1 after token 2' in (
            problem.message
        )


def test_a_holder_restarted_inside_its_block_keeps_its_hold_and_verifies(
    store_url: str, tmp_path: Path
) -> None:
    """A restart of the holder takes its own hold again with a new token and keeps the
    time its holding began (what an effect in doubt under it is counted from): the row
    then differs from the restart's record, and verify must follow it."""
    log = tmp_path / "resource.log"
    dies = ("--lease-ttl", "0.5", "--kind", "create")
    assert contender(store_url, "dies", log, *dies, "--die-in-tool") == -signal.SIGKILL
    time.sleep(1.0)  # the dead holder's lease expires by the store's clock
    assert contender(store_url, "dies", log, *dies) == oncelog.EXIT_HALTED  # its effect in doubt
    with oncelog.open(store_url) as ledger:
        [hold] = ledger.holds()
        taken = [e.at for e in ledger.journal("dies") if e.event == "hold_acquired"]
        assert (hold.holder, hold.token, hold.state, len(taken)) == ("dies", 2, "blocked", 2)
        assert hold.since == taken[0] < taken[1]
        for run_id in (None, "dies"):
            report = ledger.verify(run_id=run_id)
            assert report.ok, report.problems
