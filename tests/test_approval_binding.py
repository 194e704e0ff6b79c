"""A person approves one request, bound to the arguments they read; a forged approval row
lets nothing run, and ``verify`` reports it. On both stores, by the public API and by
real agent processes."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog.audit._verify import verify
from oncelog.stores._postgres import PostgresStore
from oncelog.stores._rows import journal_json
from oncelog.stores._rows import text as quoted
from oncelog.stores._sql_tx import append
from oncelog.stores._sqlite import SQLiteStore

from .support import oncelog_cli
from .support.launch import run_python
from .test_approvals import deleter, deletions

Tool = oncelog.Tool[..., Any]


@dataclass
class Provider:
    """What really got deleted; ``silent`` makes the next call go unanswered."""

    deleted: list[str] = field(default_factory=list)
    silent: bool = False


def delete_tool(ledger: oncelog.Ledger, provider: Provider) -> Tool:
    @ledger.tool(kind="destructive", name="delete_env")
    def delete_env(env: str, *, idempotency_key: str) -> str:
        if provider.silent:
            raise ConnectionError("no answer from the provider")
        provider.deleted.append(env)
        return env

    return delete_env


def ask(ledger: oncelog.Ledger, tool: Tool, env: str, run_id: str = "r1") -> Any:
    """The agent (started again each time) asking to delete ``env``."""
    with ledger.run(run_id) as run:
        return run.effect("delete", tool, env)


def waits(ledger: oncelog.Ledger, tool: Tool, env: str) -> oncelog.Approval:
    with pytest.raises(oncelog.ApprovalRequired):
        ask(ledger, tool, env)
    [pending] = ledger.approvals()
    return pending


def tamper(store_url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """What someone with write access to the database does, behind the ledger's back."""
    if store_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(sql.replace("?", "%s"), params)
    else:
        with closing(sqlite3.connect(store_url)) as lite:
            lite.execute(sql, params)
            lite.commit()


def state_problems(store_url: str) -> list[str]:
    with oncelog.open(store_url) as ledger:
        report = verify(ledger.store)
    assert {p.kind for p in report.problems} <= {"state"}, report.problems
    return [p.message for p in report.problems]


# -- a person decides the request they read ------------------------------------------------


def test_approving_the_staging_request_never_lets_production_run(
    ledger: oncelog.Ledger,
) -> None:
    provider = Provider()
    tool = delete_tool(ledger, provider)
    staging = waits(ledger, tool, "staging")
    production = waits(ledger, tool, "production")  # restarted, the model now says production
    [superseded] = [a for a in ledger.approvals(None) if a.id == staging.id]
    assert superseded.status is oncelog.ApprovalStatus.SUPERSEDED
    with pytest.raises(oncelog.UnknownApproval, match="different arguments"):
        ledger.approve("r1", "delete", by="alice")  # which one? not "the newest"
    with pytest.raises(oncelog.UnknownApproval, match="superseded"):
        ledger.approve("r1", "delete", by="alice", request=staging.id)
    with pytest.raises(oncelog.UnknownApproval, match="superseded"):
        ledger.deny("r1", "delete", by="alice", args_hash=staging.args_hash)
    with pytest.raises(oncelog.ApprovalRequired):
        ask(ledger, tool, "production")
    assert provider.deleted == []
    decided = ledger.approve("r1", "delete", by="alice", args_hash=production.args_hash)
    assert (decided.id, decided.args_json) == (production.id, '{"args":["production"],"kwargs":{}}')
    assert ask(ledger, tool, "production") == "production"
    assert provider.deleted == ["production"]


def test_an_approval_given_before_the_arguments_changed_stays_with_its_arguments(
    ledger: oncelog.Ledger,
) -> None:
    provider = Provider()
    tool = delete_tool(ledger, provider)
    staging = waits(ledger, tool, "staging")
    ledger.approve("r1", "delete", by="alice", request=staging.id)
    production = waits(ledger, tool, "production")
    assert production.id != staging.id
    assert provider.deleted == []
    with pytest.raises(oncelog.UnknownApproval, match="different arguments"):
        ledger.deny("r1", "delete", by="bob")


def test_the_journal_records_which_request_and_arguments_were_decided(
    ledger: oncelog.Ledger,
) -> None:
    tool = delete_tool(ledger, Provider())
    asked = waits(ledger, tool, "staging")
    ledger.deny("r1", "delete", by="carol", request=asked.id, note="not today")
    [entry] = [e for e in ledger.journal("r1") if e.event == "approval_denied"]
    assert (entry.data["request"], entry.data["args_hash"], entry.data["by"]) == (
        asked.id, asked.args_hash, "carol",
    )  # fmt: skip
    [requested] = [e for e in ledger.journal("r1") if e.event == "approval_requested"]
    assert (requested.data["request"], requested.data["superseded"]) == (asked.id, [])


def test_a_request_named_wrongly_is_refused_and_changes_nothing(ledger: oncelog.Ledger) -> None:
    tool = delete_tool(ledger, Provider())
    asked = waits(ledger, tool, "staging")
    before = ledger.journal("r1")
    cases: list[dict[str, Any]] = [
        {"request": asked.id + 99},
        {"args_hash": "0" * 64},
        {"request": asked.id, "args_hash": "0" * 64},  # both given: they must agree
    ]
    for named in cases:
        with pytest.raises(oncelog.UnknownApproval, match="no approval request with"):
            ledger.approve("r1", "delete", by="alice", **named)
    with pytest.raises(oncelog.UnknownApproval):
        ledger.approve("r1", "other-step", by="alice", request=asked.id)
    with pytest.raises(oncelog.UnknownApproval):
        ledger.approve("r1 ", "delete", by="alice", request=asked.id)  # ids as stored
    assert ledger.journal("r1") == before
    assert ledger.approvals() == [asked]


# -- real processes: killed, restarted with other arguments --------------------------------


def cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "oncelog", *args, "--db", store_url)


def test_a_restarted_agent_asking_production_is_not_let_through_by_the_staging_approval(
    store_url: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    assert deleter(store_url, markers, "staging")[0] == oncelog.EXIT_WAITING
    listed = oncelog_cli(store_url, "approvals")
    staging_id = listed.split(":", 1)[0].removeprefix("request ")
    assert '"staging"' in listed
    # The person approves what they read; the agent is killed as the approval is used.
    oncelog_cli(store_url, "approve", "r1", "delete", "--request", staging_id, "--by", "alice")
    code, _ = deleter(store_url, markers, "staging", crash_at="before_intent_commit@delete")
    assert code == -9
    for _ in range(2):  # restarted, the model now says production
        code, out = deleter(store_url, markers, "production")
        assert code == oncelog.EXIT_WAITING, out
    assert deletions(markers) == []
    refused = cli(store_url, "approve", "r1", "delete", "--by", "bob")
    assert refused.returncode == oncelog.UnknownApproval.exit_code  # 5, no usage banner
    assert "different arguments" in refused.stderr
    again = cli(store_url, "approve", "r1", "delete", "--request", staging_id, "--by", "bob")
    assert again.returncode == oncelog.UnknownApproval.exit_code
    assert "not pending" in again.stderr
    assert deleter(store_url, markers, "production")[0] == oncelog.EXIT_WAITING
    assert deletions(markers) == []


def test_a_superseded_request_cannot_be_approved_from_the_cli(
    store_url: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    assert deleter(store_url, markers, "staging")[0] == oncelog.EXIT_WAITING
    with oncelog.open(store_url) as ledger:
        [staging] = ledger.approvals()
    assert deleter(store_url, markers, "production")[0] == oncelog.EXIT_WAITING
    for named in (("--request", str(staging.id)), ("--args-hash", staging.args_hash), ()):
        refused = cli(store_url, "approve", "r1", "delete", *named, "--by", "alice")
        assert refused.returncode == oncelog.UnknownApproval.exit_code, refused
    assert deleter(store_url, markers, "production")[0] == oncelog.EXIT_WAITING
    assert deletions(markers) == []
    with oncelog.open(store_url) as ledger:
        [production] = ledger.approvals()
    said = oncelog_cli(
        store_url, "approve", "r1", "delete", "--request", str(production.id), "--by", "alice"
    )
    assert '"production"' in said
    assert deleter(store_url, markers, "production")[0] == 0
    assert [line.split()[1] for line in deletions(markers)] == ["production"]


# -- forged approval rows let nothing run, and verify reports them --------------------------

PRODUCTION = '{"args":["production"],"kwargs":{}}'


def production_hash() -> str:
    from oncelog.records._serialization import digest

    return digest(PRODUCTION)


def forge_status(store_url: str, ledger: oncelog.Ledger, tool: Tool, provider: Provider) -> None:
    """A pending request set to approved by hand (nobody named)."""
    waits(ledger, tool, "production")
    tamper(store_url, "UPDATE approvals SET status = 'approved'")


def forge_named_status(
    store_url: str, ledger: oncelog.Ledger, tool: Tool, provider: Provider
) -> None:
    """A pending request set to approved in someone's name, with no decision journalled."""
    waits(ledger, tool, "production")
    tamper(store_url, "UPDATE approvals SET status = 'approved', decided_by = 'alice'")


def forge_insert(store_url: str, ledger: oncelog.Ledger, tool: Tool, provider: Provider) -> None:
    """An approved row inserted from nothing."""
    waits(ledger, tool, "production")
    tamper(
        store_url,
        "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, status, requested_at) "
        "VALUES ('r1', 'delete', 'delete_env', ?, ?, 'approved', 0)",
        (production_hash(), PRODUCTION),
    )


def forge_copy(store_url: str, ledger: oncelog.Ledger, tool: Tool, provider: Provider) -> None:
    """The staging approval copied onto the production arguments."""
    staging = waits(ledger, tool, "staging")
    ledger.approve("r1", "delete", by="alice", request=staging.id)
    tamper(
        store_url,
        "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, status, requested_at, "
        "decided_by, decided_at) SELECT run_id, step_id, tool, ?, ?, status, requested_at, "
        "decided_by, decided_at FROM approvals WHERE id = ?",
        (production_hash(), PRODUCTION, staging.id),
    )


def forge_moved(store_url: str, ledger: oncelog.Ledger, tool: Tool, provider: Provider) -> None:
    """The staging approval's row edited to hold the production arguments."""
    staging = waits(ledger, tool, "staging")
    ledger.approve("r1", "delete", by="alice", request=staging.id)
    tamper(
        store_url,
        "UPDATE approvals SET args_hash = ?, args = ? WHERE id = ?",
        (production_hash(), PRODUCTION, staging.id),
    )


def forge_reused(store_url: str, ledger: oncelog.Ledger, tool: Tool, provider: Provider) -> None:
    """An approval used by an attempt whose outcome was lost, set back to approved after a
    person said the deletion did not happen."""
    asked = waits(ledger, tool, "production")
    ledger.approve("r1", "delete", by="alice", request=asked.id)
    provider.silent = True
    with pytest.raises(oncelog.AmbiguousOutcome):
        ask(ledger, tool, "production")
    provider.silent = False
    ledger.resolve("r1", "delete", oncelog.Resolution.NOT_DONE, by="bob")
    tamper(store_url, "UPDATE approvals SET status = 'approved' WHERE id = ?", (asked.id,))


def forge_extended(store_url: str, ledger: oncelog.Ledger, tool: Tool, provider: Provider) -> None:
    """An approval that lapsed, its expiry moved forward and set back to approved."""
    asked = waits(ledger, tool, "production")
    ledger.approve("r1", "delete", by="alice", request=asked.id, expires_in=0.001)
    # The decision really lasts a millisecond: on a fast machine the next ask could come
    # inside it, and then the approval is genuine, not forged.
    time.sleep(0.05)
    tamper(
        store_url,
        "UPDATE approvals SET status = 'approved', expires_at = expires_at + 3600 WHERE id = ?",
        (asked.id,),
    )


@pytest.mark.parametrize(
    ("forge", "verify_says"),
    [
        (forge_status, "without anyone named"),
        (forge_named_status, "no such decision"),
        (forge_insert, "the journal has no such request"),
        (forge_copy, "the journal has no such request"),
        (forge_moved, "the journal's request 1 asked about step 'delete' with arguments"),
        (forge_reused, "already used it"),
        (forge_extended, "expiry"),
    ],
    ids=["status", "named-status", "insert", "copy", "moved", "reused", "extended"],
)
def test_a_forged_approval_lets_nothing_run_and_verify_reports_it(
    store_url: str, forge: Callable[[str, oncelog.Ledger, Tool, Provider], None], verify_says: str
) -> None:
    provider = Provider()
    with oncelog.open(store_url) as ledger:
        tool = delete_tool(ledger, provider)
        forge(store_url, ledger, tool, provider)
        for _ in range(2):
            with pytest.raises(oncelog.ApprovalRequired):
                ask(ledger, tool, "production")
        assert provider.deleted == []
        [pending] = ledger.approvals()  # a genuine request waits for a person
        assert pending.args_json == PRODUCTION
    problems = state_problems(store_url)
    assert any(verify_says in p for p in problems), problems
    with oncelog.open(store_url) as ledger:  # a person's real approval still works
        tool = delete_tool(ledger, provider)
        ledger.approve("r1", "delete", by="dana", request=pending.id)
        assert ask(ledger, tool, "production") == "production"
    assert provider.deleted == ["production"]


def test_a_forged_denial_stops_the_effect_and_verify_reports_it(store_url: str) -> None:
    provider = Provider()
    with oncelog.open(store_url) as ledger:
        tool = delete_tool(ledger, provider)
        waits(ledger, tool, "production")
        tamper(store_url, "UPDATE approvals SET status = 'denied', decided_by = 'mallory'")
        with pytest.raises(oncelog.ApprovalDenied):
            ask(ledger, tool, "production")
    assert provider.deleted == []
    assert any("mallory denied it; the journal has no such decision" in p
               for p in state_problems(store_url))  # fmt: skip


def test_the_cli_says_what_it_cuts_and_json_shows_it_whole(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        tool = delete_tool(ledger, Provider())
        waits(ledger, tool, "stage-" + "x" * 5000)
        with pytest.raises(oncelog.ApprovalRequired):
            ask(ledger, tool, "trailing ", run_id="victim ")
    listed = oncelog_cli(store_url, "approvals")
    assert "CUT: " in listed
    assert "x" * 5000 not in listed
    assert 'request 2: "victim " delete (delete_env) pending' in listed
    assert '"trailing "' in listed
    whole = oncelog_cli(store_url, "approvals", "--json")
    assert "x" * 5000 in whole


def test_a_request_no_agent_asked_is_never_shown_as_its_question(store_url: str) -> None:
    """A pending row inserted by hand before the agent asks: a person cannot decide it,
    the agent does not wait on it but asks anew, and verify reports it."""
    provider = Provider()
    with oncelog.open(store_url) as ledger:
        tool = delete_tool(ledger, provider)
        with pytest.raises(oncelog.ApprovalRequired):
            ask(ledger, tool, "staging")
        tamper(
            store_url,
            "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, status, requested_at) "
            "VALUES ('r1', 'delete', 'delete_env', ?, ?, 'pending', 0)",
            (production_hash(), PRODUCTION),
        )
        [planted] = [a for a in ledger.approvals() if a.args_json == PRODUCTION]
        with pytest.raises(oncelog.CorruptRecord, match="not in the journal: no agent asked it"):
            ledger.approve("r1", "delete", by="alice", request=planted.id)
        with pytest.raises(oncelog.ApprovalRequired):
            ask(ledger, tool, "production")  # asks anew instead of waiting on the planted row
        [genuine] = [a for a in ledger.approvals() if a.args_json == PRODUCTION and a != planted]
        ledger.approve("r1", "delete", by="dana", request=genuine.id)
        assert ask(ledger, tool, "production") == "production"
    assert provider.deleted == ["production"]
    assert any(f"approval {planted.id} of step 'delete': the journal has no such request" in p
               for p in state_problems(store_url))  # fmt: skip


def move_to_production(store_url: str, asked: oncelog.Approval) -> None:
    """The staging request's row rewritten, arguments and hash together, to production:
    what it shows would be what it approves, but no agent asked it."""
    tamper(
        store_url,
        "UPDATE approvals SET args_hash = ?, args = ? WHERE id = ?",
        (production_hash(), PRODUCTION, asked.id),
    )


def show_staging(store_url: str, asked: oncelog.Approval) -> None:
    """The production request's arguments edited apart from their hash: the page would
    show staging while the decision bound production's hash."""
    tamper(store_url, "UPDATE approvals SET args = ?", ('{"args":["staging"],"kwargs":{}}',))


@pytest.mark.parametrize(
    ("asked_for", "tamper_with", "refused", "verify_says"),
    [
        ("staging", move_to_production, "no agent asked it", "the journal's request"),
        ("production", show_staging, "do not match its arguments hash",
         "do not match its arguments hash"),
    ],
    ids=["moved", "edited-apart"],
)  # fmt: skip
def test_a_request_edited_behind_the_ledger_cannot_be_approved(
    store_url: str,
    asked_for: str,
    tamper_with: Callable[[str, oncelog.Approval], None],
    refused: str,
    verify_says: str,
) -> None:
    provider = Provider()
    with oncelog.open(store_url) as ledger:
        tool = delete_tool(ledger, provider)
        asked = waits(ledger, tool, asked_for)
        tamper_with(store_url, asked)
        with pytest.raises(oncelog.CorruptRecord, match=refused):
            ledger.approve("r1", "delete", by="alice", request=asked.id)
        with pytest.raises(oncelog.ApprovalRequired):
            ask(ledger, tool, "production")
    assert provider.deleted == []
    assert any(verify_says in p for p in state_problems(store_url))


def test_a_request_journalled_before_requests_were_named_is_still_decidable(
    store_url: str,
) -> None:
    """Ledgers written before ``approval_requested`` named its request id: such a row is
    matched by run, step and arguments hash, so verify is quiet and a person decides it."""
    with oncelog.open(store_url) as ledger:
        store = ledger.store
        assert isinstance(store, SQLiteStore | PostgresStore)
        with store._tx() as tx:
            tx.execute(
                "INSERT INTO runs (run_id, status, created_at, updated_at) "
                "VALUES ('old', 'waiting', 0, 0)"
            )
            tx.execute(
                "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, status, "
                "requested_at) VALUES ('old', 'delete', 'delete_env', ?, ?, 'pending', 0)",
                (production_hash(), PRODUCTION),
            )
            # The record as that version wrote it: no ``request``.
            old_request = journal_json(
                step_id=quoted("delete"), args_hash=quoted(production_hash()), args=PRODUCTION
            )
            append(tx, "old", 0, "approval_requested", old_request)
        [old] = ledger.approvals()
        assert ledger.approve("old", "delete", by="alice", request=old.id).decided_by == "alice"
    assert [p for p in state_problems(store_url) if "approval" in p] == []
