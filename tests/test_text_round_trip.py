"""Text comes back from the ledger exactly as it went in, on both stores: NUL (which
PostgreSQL's ``text`` refuses), the escape character the PostgreSQL store uses for it,
and spellings that look like either, in every text column a caller can fill.
"""

from __future__ import annotations

from typing import Any

import pytest

import oncelog
from oncelog import AgentBudget, Budget, StepState
from oncelog._serialization import decode
from oncelog._verify import verify

NUL = "\x00"
# A NUL, the store's escape character (DLE) alone, before a "0" (the escaped spelling of
# NUL), doubled, and JSON's own spelling of a NUL written out as plain text.
AWKWARD = f"a{NUL}b \x10 \x100 \x10\x10 {NUL}\x10 \\u0000 \\\\u0000 end{NUL}"


def named(base: str) -> str:
    return f"{base}{AWKWARD}"


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
    run_id, step_id, agent = named("run"), named("step"), named("agent")

    @ledger.tool(kind="create", name=named("tool"))
    def create(value: str, *, idempotency_key: str) -> dict[str, Any]:
        return {named("key"): value}

    @ledger.tool(kind="destructive")
    def delete(value: str, *, idempotency_key: str) -> str:
        return value

    with ledger.run(run_id, plan=[step_id, "delete"], agent=agent) as run:
        assert run.effect(step_id, create, named("arg")) == {named("key"): named("arg")}
        with pytest.raises(oncelog.ApprovalRequired):
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
    assert steps[0].tool == named("tool")
    [decided] = ledger.approvals(None)
    assert (decided.decided_by, decided.note) == (named("alice"), named("note"))
    assert {e.run_id for e in ledger.journal(run_id)} == {run_id}
    assert verify(ledger.store).ok


def test_reasons_notes_and_names_of_people_come_back_exactly(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="create")
    def send(*, idempotency_key: str) -> None:
        raise RuntimeError("lost")

    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run(named("r")) as run:
        run.effect(named("s"), send)
    resolved = ledger.resolve(
        named("r"), named("s"), "done", by=named("bob"), result=named("result"), note=named("n")
    )
    assert resolved.result_json is not None
    assert decode(resolved.result_json) == named("result")
    [entry] = [e for e in ledger.journal(named("r")) if e.event == "resolved"]
    assert (entry.data["by"], entry.data["note"]) == (named("bob"), named("n"))

    halt = ledger.halt(named("why"), by=named("carol"), agent=named("agent"))
    assert (halt.target, halt.reason, halt.set_by) == (named("agent"), named("why"), named("carol"))
    cleared = ledger.clear_halt(by=named("dave"), agent=named("agent"), note=named("ok"))
    assert (cleared.cleared_by, cleared.note) == (named("dave"), named("ok"))
    assert ledger.halts(active_only=False)[0] == cleared
    assert verify(ledger.store).ok


def test_submitted_input_and_budgets_come_back_exactly(ledger: oncelog.Ledger) -> None:
    ledger.submit(named("queued"), {named("k"): named("v")}, agent=named("agent"))
    [queued] = [r for r in ledger.runs() if r.run_id == named("queued")]
    assert queued.agent == named("agent")
    assert queued.input == {named("k"): named("v")}
    ledger.set_agent_budget(named("agent"), AgentBudget(calls=5), by=named("erin"))
    ledger.set_budget(named("queued"), Budget(steps=3), by=named("frank"))
    [agent_set] = [e for e in ledger.journal("") if e.event == "agent_budget_set"]
    assert (agent_set.data["agent"], agent_set.data["by"]) == (named("agent"), named("erin"))


def test_a_budget_alert_about_an_awkward_name_is_journalled_once(
    ledger: oncelog.Ledger,
) -> None:
    """Alerts are deduplicated by reading their JSON in SQL, where PostgreSQL's ``jsonb``
    refuses a NUL: the comparison must still find the first alert."""
    alerts: list[oncelog.BudgetAlert] = []
    ledger.on_budget_alert = alerts.append
    ledger.set_agent_budget(named("agent"), AgentBudget(calls=10, warn_at=0.1), by="ops")

    @ledger.tool(kind="upsert")
    def put(n: int, *, idempotency_key: str) -> int:
        return n

    with ledger.run(named("r"), agent=named("agent"), budget=Budget(steps=10, warn_at=0.1)) as run:
        for n in range(4):
            run.effect(f"put-{n}", put, n)
    journalled = [e for e in ledger.journal(None) if e.event == "budget_alert"]
    by_limit = {(e.data["scope"], e.data["target"], e.data["limit"]) for e in journalled}
    assert len(journalled) == len(by_limit), journalled
    assert ("agent", named("agent"), "calls") in by_limit
    assert ("run", named("r"), "steps") in by_limit
