"""Text comes back from the ledger exactly as it went in, on both stores: NUL (which
PostgreSQL's ``text`` refuses), the escape character the PostgreSQL store uses for it,
and spellings that look like either, in every text column a caller can fill. Names (run
and step ids, agents, tools) refuse a NUL on every store (``_names``); they carry the
rest.
"""

from __future__ import annotations

from typing import Any

import pytest

import oncelog
from oncelog import AgentBudget, Budget, StepState
from oncelog.audit._verify import verify
from oncelog.records._serialization import decode, encode
from oncelog.stores import open_store
from oncelog.stores._sql_store import SQLStore

NUL = "\x00"
# A NUL, the store's escape character (DLE) alone, before a "0" (the escaped spelling of
# NUL), doubled, and JSON's own spelling of a NUL written out as plain text.
AWKWARD = f"a{NUL}b \x10 \x100 \x10\x10 {NUL}\x10 \\u0000 \\\\u0000 end{NUL}"


def named(base: str) -> str:
    """Free text: a reason, a note, who, arguments, results."""
    return f"{base}{AWKWARD}"


def ident(base: str) -> str:
    """A name: everything awkward but the NUL."""
    return f"{base}{AWKWARD.replace(NUL, '')}"


def test_a_nul_in_a_tools_error_is_an_outcome_in_doubt_with_its_reason_kept(
    ledger: oncelog.Ledger,
) -> None:
    """The regression: on PostgreSQL the error's NUL made recording the halt fail with
    ``ConfigurationError``, and the reason was lost."""

    @ledger.tool(kind="create")
    def send(to: str, *, idempotency_key: str) -> None:
        raise RuntimeError(f"gateway said {NUL}no{NUL}")

    with pytest.raises(oncelog.AmbiguousOutcome) as raised, ledger.run("r") as run:
        run.effect("send", send, "a@example.com")
    said = f"RuntimeError: gateway said {NUL}no{NUL}"
    assert said in str(raised.value)
    record = ledger.get_run("r")
    assert record.status is oncelog.RunStatus.HALTED
    assert record.reason == str(raised.value)
    assert ledger.steps("r")[0].state is StepState.UNKNOWN
    [unknown] = [e for e in ledger.journal("r") if e.event == "unknown"]
    assert said in unknown.data["reason"]


def test_every_text_a_caller_gives_comes_back_exactly(ledger: oncelog.Ledger) -> None:
    run_id, step_id, agent = ident("run"), ident("step"), ident("agent")

    @ledger.tool(kind="create", name=ident("tool"))
    def create(value: str, *, idempotency_key: str) -> dict[str, Any]:
        return {named("key"): value}

    @ledger.tool(kind="destructive")
    def delete(value: str, *, idempotency_key: str) -> str:
        return value

    with (
        pytest.raises(oncelog.ApprovalRequired),
        ledger.run(run_id, plan=[step_id, "delete"], agent=agent) as run,
    ):
        assert run.effect(step_id, create, named("arg")) == {named("key"): named("arg")}
        run.effect("delete", delete, named("target"))
    [pending] = ledger.approvals()
    assert (pending.run_id, pending.step_id) == (run_id, "delete")
    ledger.approve(run_id, "delete", by=named("alice"), note=named("note"))
    with ledger.run(run_id, plan=[step_id, "delete"], agent=agent) as run:
        assert run.effect(step_id, create, named("arg")) == {named("key"): named("arg")}
        assert run.effect("delete", delete, named("target")) == named("target")

    record = ledger.get_run(run_id)
    assert (record.run_id, record.agent, record.plan) == (run_id, agent, (step_id, "delete"))
    steps = ledger.steps(run_id)
    assert [s.step_id for s in steps] == [step_id, "delete"]
    assert steps[0].tool == ident("tool")
    [decided] = ledger.approvals(None)
    assert (decided.decided_by, decided.note) == (named("alice"), named("note"))
    assert {e.run_id for e in ledger.journal(run_id)} == {run_id}
    assert verify(ledger.store).ok


def test_reasons_notes_and_names_of_people_come_back_exactly(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="create")
    def send(*, idempotency_key: str) -> None:
        raise RuntimeError("lost")

    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run(ident("r")) as run:
        run.effect(ident("s"), send)
    resolved = ledger.resolve(
        ident("r"), ident("s"), "done", by=named("bob"), result=named("result"), note=named("n")
    )
    assert resolved.result_json is not None
    assert decode(resolved.result_json) == named("result")
    [entry] = [e for e in ledger.journal(ident("r")) if e.event == "resolved"]
    assert (entry.data["by"], entry.data["note"]) == (named("bob"), named("n"))

    halt = ledger.halt(named("why"), by=named("carol"), agent=ident("agent"), ahead=True)
    assert (halt.target, halt.reason, halt.set_by) == (ident("agent"), named("why"), named("carol"))
    cleared = ledger.clear_halt(by=named("dave"), agent=ident("agent"), note=named("ok"))
    assert (cleared.cleared_by, cleared.note) == (named("dave"), named("ok"))
    assert ledger.halts(active_only=False)[0] == cleared
    assert verify(ledger.store).ok


def test_submitted_input_and_budgets_come_back_exactly(ledger: oncelog.Ledger) -> None:
    ledger.submit(ident("queued"), {named("k"): named("v")}, agent=ident("agent"))
    [queued] = [r for r in ledger.runs() if r.run_id == ident("queued")]
    assert queued.agent == ident("agent")
    assert queued.input == {named("k"): named("v")}
    ledger.set_agent_budget(ident("agent"), AgentBudget(calls=5), by=named("erin"))
    ledger.set_budget(ident("queued"), Budget(steps=3), by=named("frank"))
    [agent_set] = [e for e in ledger.journal("") if e.event == "agent_budget_set"]
    assert (agent_set.data["agent"], agent_set.data["by"]) == (ident("agent"), named("erin"))


def test_a_budget_alert_about_an_awkward_name_is_journalled_once(
    ledger: oncelog.Ledger,
) -> None:
    """Alerts are deduplicated by reading their JSON in SQL: a name spelled with the
    store's escape character must still find the first alert."""
    alerts: list[oncelog.BudgetAlert] = []
    ledger.on_budget_alert = alerts.append
    ledger.set_agent_budget(ident("agent"), AgentBudget(calls=10, warn_at=0.1), by="ops")

    @ledger.tool(kind="upsert")
    def put(n: int, *, idempotency_key: str) -> int:
        return n

    with ledger.run(ident("r"), agent=ident("agent"), budget=Budget(steps=10, warn_at=0.1)) as run:
        for n in range(4):
            run.effect(f"put-{n}", put, n)
    journalled = [e for e in ledger.journal(None) if e.event == "budget_alert"]
    by_limit = {(e.data["scope"], e.data["target"], e.data["limit"]) for e in journalled}
    assert len(journalled) == len(by_limit), journalled
    assert ("agent", ident("agent"), "calls") in by_limit
    assert ("run", ident("r"), "steps") in by_limit


@pytest.mark.parametrize(
    "value",
    [f"a{NUL}b", "a\x10b", "a\x100b", "a\x10\x10b", "\\u0000", "\\\\u0000", "\\\\\\u0000", AWKWARD],
)
def test_a_json_field_read_in_sql_equals_the_same_text_bound_beside_it(
    store_kind: str, store_url: str, value: str
) -> None:
    """Statements compare fields of the journal's JSON with bound strings (budget alerts
    do, to journal each alert once): the field read in SQL must equal the bound text on
    both stores, however it is spelled in JSON. SQLite's JSON functions end a string at a
    NUL; the fields compared in SQL are names, which refuse one on every store."""
    # SQLite's ->> ends a string at a NUL: the limit that makes names refuse one.
    equal = not (store_kind == "sqlite" and NUL in value)
    store = open_store(store_url)
    assert isinstance(store, SQLStore)
    try:
        document = encode({"k": value, "other": AWKWARD}, what="a document", limit=1 << 20)
        field = store.dialect.json_text("CAST(? AS TEXT)", "k")
        with store._reading() as tx:
            row = tx.execute(f"SELECT {field} = ?", (document, value)).fetchone()
        assert row is not None
        assert bool(row[0]) is equal
    finally:
        store.close()
