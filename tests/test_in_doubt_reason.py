"""Why an effect is in doubt is kept on its step row: the error its call raised survives the
restarts that find the effect in doubt again, reaches the CLI and the console from that
row, and ``verify`` holds the row to the journal."""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Callable

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli

from .test_store_contract import sql


def refused(*, idempotency_key: str) -> None:
    raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))


def timed_out(*, idempotency_key: str) -> None:
    raise TimeoutError("no answer")


def attempt(store_url: str, call: Callable[..., None] = refused) -> oncelog.AmbiguousOutcome:
    """One process's life: open the ledger, run the agent until the effect is in doubt."""
    with oncelog.open(store_url) as ledger:
        send = ledger.tool(kind="create", name="send")(call)
        with pytest.raises(oncelog.AmbiguousOutcome) as raised, ledger.run("r") as run:
            run.effect("mail", send)
    return raised.value


def cli_output(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_the_original_error_survives_restarts(store_url: str) -> None:
    assert "Connection refused" in attempt(store_url).message
    for _ in range(2):
        later = attempt(store_url)
        assert "no probe is declared" in later.message  # what recovery says, this time
    with oncelog.open(store_url, create=False) as ledger:
        [step] = ledger.in_doubt()
        assert step.reason is not None
        assert "URLError" in step.reason
        assert "Connection refused" in step.reason
        assert ledger.steps("r")[0].reason == step.reason
        assert ledger.verify().ok
    assert "Connection refused" in cli_output("unknown", "--db", store_url)
    [row] = json.loads(cli_output("unknown", "--db", store_url, "--json"))
    assert "Connection refused" in row["reason"]


def test_the_console_reads_the_reason_from_the_row(store_url: str) -> None:
    pytest.importorskip("starlette", reason="the console extra is not installed")
    from oncelog.console._queries import doubts

    attempt(store_url)
    attempt(store_url)
    with oncelog.open(store_url, create=False) as ledger:
        [doubt] = doubts(ledger)["doubts"]
    assert "Connection refused" in doubt.reason


def test_a_new_attempt_has_its_own_reason_and_a_decision_keeps_it(store_url: str) -> None:
    attempt(store_url)
    with oncelog.open(store_url) as ledger:
        ledger.resolve("r", "mail", "not_done", by="alice")
        assert ledger.steps("r")[0].reason is not None  # why it was in doubt stays shown
    assert "TimeoutError" in attempt(store_url, timed_out).message
    with oncelog.open(store_url, create=False) as ledger:
        [step] = ledger.in_doubt()
        assert step.attempts == 2
        assert step.reason is not None
        assert "TimeoutError: no answer" in step.reason
        assert "URLError" not in step.reason
        assert ledger.verify().ok


def test_verify_finds_an_edited_reason(store_url: str) -> None:
    attempt(store_url)
    sql(store_url, "UPDATE steps SET reason = 'it was fine'")
    with oncelog.open(store_url, create=False) as ledger:
        report = ledger.verify()
    assert not report.ok
    assert any("other reason" in problem.message for problem in report.problems)


def test_the_migration_fills_the_reason_in_from_the_journal(store_url: str) -> None:
    attempt(store_url)
    attempt(store_url)
    # As a ledger of version 11 was: without the reason, nor what later versions added.
    sql(store_url, "ALTER TABLE steps DROP COLUMN reason")
    sql(store_url, "ALTER TABLE runs DROP COLUMN stop_seq")
    sql(store_url, "ALTER TABLE runs DROP COLUMN stop")
    sql(store_url, "DROP INDEX journal_approvals")
    sql(store_url, "DELETE FROM schema_migrations WHERE version >= 12")
    with oncelog.open(store_url, create=False) as ledger:
        [step] = ledger.in_doubt()
        assert step.reason is not None
        assert "Connection refused" in step.reason
        assert ledger.verify().ok
