"""A step recorded after it ran (a model call, a read) is one journal record, ``recorded``,
where it was an intent and an outcome; an effect is still the two. On both stores, by
every path that records one: the store's own statements, the general path (a run with a
budget, a step asked again) and, on PostgreSQL, the server's function. A ledger holding
pairs written as the previous version wrote them and single records verifies whole, and
verify holds the rows of either shape to the journal."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from typing import Any

import pytest

import oncelog
from oncelog import StepState, StepType
from oncelog.audit._verify import verify
from oncelog.records._chain import canonical_head
from oncelog.records._serialization import digest
from oncelog.runtime._calls import usage
from oncelog.stores import Lease, NewStep, Outcome, Store
from oncelog.stores._postgres import PostgresStore
from oncelog.stores._postgres_transitions import refusal
from oncelog.stores._shared import intent_json, outcome_json
from oncelog.stores._sqlite import SQLiteStore
from oncelog.stores._sqlite_write import append, clock, insert_recorded

from .test_store_contract import alive, opened

ARGS = '{"args":["hi"],"kwargs":{}}'
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "cost": 0.01}
ANSWER = {"text": "ok", "usage": USAGE}
# Every field of a recorded entry: its intent's and its outcome's, the outcome's cost
# named apart, and the seconds the call took.
RECORDED_FIELDS = {
    "args", "args_hash", "attempt", "cost", "elapsed_us", "error", "irreversible", "key",
    "kind", "reason", "result", "settled_cost", "state", "step_id", "token", "tokens_in",
    "tokens_out", "tool", "type",
}  # fmt: skip


def acquire(store: Store, run_id: str, **options: Any) -> Lease:
    lease, _ = store.acquire(
        run_id, owner="worker", ttl=60.0, plan=None, replace_plan=False, create=True,
        owner_is_dead=options.pop("owner_is_dead", alive), **options,
    )  # fmt: skip
    return lease


def model(seq: int, step_id: str, **options: Any) -> NewStep:
    return NewStep(
        seq, step_id, StepType.LLM, "gpt", "llm", f"key-{step_id}", digest(ARGS), ARGS,
        elapsed=0.25, **options,
    )  # fmt: skip


def answered(text: str, tokens: int = 5) -> Outcome:
    return Outcome(StepState.DONE, f'{{"text":"{text}"}}', None, tokens, 2, 0.5)


def slowly(answer: dict[str, Any]) -> dict[str, Any]:
    """A model call that takes a twentieth of a second."""
    time.sleep(0.05)
    return answer


def events(store: Store, run_id: str) -> dict[int, list[str]]:
    """Each position's journal events, in order."""
    found: dict[int, list[str]] = {}
    for entry in store.journal(run_id, 0, 10_000):
        if entry.seq is not None:
            found.setdefault(entry.seq, []).append(entry.event)
    return found


def test_a_model_call_and_a_read_are_one_record_each_and_an_effect_two(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        send = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
        with ledger.run("r") as run:
            run.llm("ask", slowly, ANSWER)
            assert run.read("look", len, "abc") == 3
            run.effect("send", send, 1)
        store = ledger.store
        assert events(store, "r") == {0: ["recorded"], 1: ["recorded"], 2: ["intent", "outcome"]}
        steps = {step.step_id: step for step in ledger.steps("r")}
        asked = next(e for e in ledger.journal("r") if e.event == "recorded")
        assert set(asked.data) == RECORDED_FIELDS
        expected = {
            "args": {"args": [ANSWER], "kwargs": {}}, "attempt": 1, "cost": 0.0, "error": None,
            "irreversible": False, "kind": "llm", "reason": None, "settled_cost": 0.01,
            "state": "done", "step_id": "ask", "token": 1, "tokens_in": 11, "tokens_out": 7,
            "type": "llm", "key": steps["ask"].key, "args_hash": steps["ask"].args_hash,
            "result": ANSWER, "tool": steps["ask"].tool,
        }  # fmt: skip
        assert {k: v for k, v in asked.data.items() if k != "elapsed_us"} == expected
        # Its time is the row's start to the bit; it finished ``elapsed_us`` later (the
        # call's time, to the microsecond).
        assert asked.at == steps["ask"].started_at
        finished = steps["ask"].finished_at
        assert finished is not None
        assert asked.data["elapsed_us"] >= 50_000
        assert finished == pytest.approx(asked.at + asked.data["elapsed_us"] / 1e6, abs=1e-5)
        assert steps["ask"].tokens_in == 11
        assert sql(store_url, "SELECT cost FROM steps WHERE step_id = 'ask'") == [(0.01,)]
        assert verify(store).ok


def test_a_run_with_a_budget_records_them_by_the_general_path_in_one_record(
    store_url: str,
) -> None:
    with oncelog.open(store_url) as ledger:
        with ledger.run("b", budget=oncelog.Budget(steps=10, tokens=1000, cost=5)) as run:
            run.llm("ask", lambda: {"text": "ok", "usage": USAGE})
            run.read("look", len, "abc")
            run.llm("again", lambda: {"text": "again", "usage": USAGE})
        assert events(ledger.store, "b") == {0: ["recorded"], 1: ["recorded"], 2: ["recorded"]}
        _, used = ledger.store.budget_usage("b")
        assert (used.steps, used.tokens) == (3, 36)
        assert used.cost == pytest.approx(0.02)
        assert ledger.store.budget_drift(None) == []
        assert verify(ledger.store).ok


def test_a_step_asked_again_is_recorded_again_in_one_record(store_url: str) -> None:
    with opened(store_url) as store:
        lease = acquire(store, "r")
        failed = Outcome(StepState.FAILED, None, '{"type":"X","message":"no"}', 3, 0)
        store.record_step(lease, model(0, "ask"), None, failed)
        store.record_step(lease, model(0, "ask", cost=1.5), StepState.FAILED, answered("ok"))
        assert events(store, "r") == {0: ["recorded", "recorded"]}
        [step] = store.steps("r", 0, 10)
        assert (step.state, step.attempts, step.tokens_in) == (StepState.DONE, 2, 5)
        assert sql(store_url, "SELECT cost FROM steps WHERE step_id = 'ask'") == [(0.5,)]
        assert step.first_started_at is not None
        records = [e for e in store.journal("r", 0, 100) if e.event == "recorded"]
        assert [e.data["attempt"] for e in records] == [1, 2]
        assert records[1].data["cost"] == 1.5  # reserved; the outcome's own settles it
        assert records[1].at == step.started_at
        assert verify(store).ok


def test_a_duplicate_or_a_stale_lease_writes_nothing(store_url: str) -> None:
    with opened(store_url) as store:
        lease = acquire(store, "r")
        store.record_step(lease, model(0, "ask"), None, answered("ok"))
        with pytest.raises(oncelog.DuplicateStep):
            store.record_step(lease, model(1, "ask"), None, answered("ok"))
        stale = acquire(store, "r", owner_is_dead=lambda owner: True)
        assert stale.token == lease.token + 1
        with pytest.raises(oncelog.LeaseLost):
            store.record_step(lease, model(1, "next"), None, answered("ok"))
        assert events(store, "r") == {0: ["recorded"]}
        assert verify(store).ok


def write_old_pair(store: Store, lease: Lease, step: NewStep, outcome: Outcome) -> None:
    """A model call recorded as the previous version recorded it: its row written once,
    an intent and an outcome journalled, by the statements that version sent (SQLite's
    own; PostgreSQL's two functions, nested in one call)."""
    if isinstance(store, SQLiteStore):
        with store._tx(durable=False) as tx:
            finished = clock()
            started = finished - step.elapsed
            assert insert_recorded(tx, lease, step, outcome, started, finished)
            entry = intent_json(lease, step, 1, None)
            append(tx, lease.run_id, step.seq, "intent", entry, started)
            data = outcome_json(outcome, 1)
            append(tx, lease.run_id, step.seq, "outcome", data, finished)
        return
    assert isinstance(store, PostgresStore)
    intent = (
        lease.run_id, lease.owner, lease.token, lease.ttl, lease.agent, step.seq,
        step.step_id, step.type.value, step.tool, step.kind, step.key, step.args_hash,
        step.args_json, step.elapsed, step.cost, int(step.irreversible),
        intent_json(lease, step, 1, None), canonical_head(lease.run_id, step.seq, "intent"),
        False,
    )  # fmt: skip
    outcome_values = (
        outcome.state.value, outcome.result_json, outcome.error_json, outcome.tokens_in,
        outcome.tokens_out, outcome.cost, outcome.retry_at, outcome_json(outcome, 1),
        canonical_head(lease.run_id, step.seq, "outcome"),
    )  # fmt: skip
    old_record = (
        "SELECT oncelog_outcome(%s, %s, %s, %s, %s, %s, oncelog_intent("
        + ", ".join(["%s"] * 19) + "), " + ", ".join(["%s"] * 9) + ")"
    )  # fmt: skip
    params = (lease.run_id, lease.owner, lease.token, lease.ttl, step.seq, step.step_id,
              *intent, *outcome_values)  # fmt: skip
    store._calls.call(old_record, params, refusal(lease, step))


def write_old_general_pair(store: Store, lease: Lease, step: NewStep, outcome: Outcome) -> None:
    """The same as the previous version's general path wrote it: the store's intent, then
    its outcome, in one transaction."""
    assert isinstance(store, SQLiteStore | PostgresStore)
    with store._tx(durable=False) as tx:
        attempt = store._begin_step(tx, lease, step, None).attempt
        store._end_step(tx, lease, step.seq, attempt, outcome)


def mixed_ledger(store: Store) -> None:
    """A run whose model calls are recorded in both shapes, around an effect."""
    lease = acquire(store, "mixed")
    write_old_pair(store, lease, model(0, "old"), answered("one"))
    store.record_step(lease, model(1, "new"), None, answered("two", tokens=9))
    write_old_general_pair(store, lease, model(2, "old-general"), answered("three"))
    send = NewStep(3, "send", StepType.EFFECT, "send", "create", "k-send", digest(ARGS), ARGS)
    store.write_intent(lease, send, None)
    store.write_outcome(lease, send, 1, Outcome(StepState.DONE, '"sent"'))
    store.record_step(lease, model(4, "new-again"), None, answered("four"))


def test_a_ledger_of_old_pairs_and_new_records_verifies(store_url: str) -> None:
    with opened(store_url) as store:
        mixed_ledger(store)
        assert events(store, "mixed") == {
            0: ["intent", "outcome"], 1: ["recorded"], 2: ["intent", "outcome"],
            3: ["intent", "outcome"], 4: ["recorded"],
        }  # fmt: skip
        report = verify(store)
        assert report.ok, report.problems
        assert verify(store, run_id="mixed").ok


def sql(store_url: str, statement: str) -> list[Any]:
    """One statement outside oncelog, in either dialect."""
    if store_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as pg:
            cur = pg.execute(statement)
            return cur.fetchall() if cur.description else []
    with closing(sqlite3.connect(store_url, isolation_level=None)) as lite:
        return lite.execute(statement).fetchall()


def tamper(store_url: str, statement: str) -> None:
    """Plain SQL as an intruder with write access would send it, the journal's
    append-only triggers out of the way."""
    if store_url.startswith("postgresql"):
        sql(store_url, f"ALTER TABLE journal DISABLE TRIGGER USER; {statement}")
        return
    with closing(sqlite3.connect(store_url, isolation_level=None)) as lite:
        for what in ("update", "delete"):
            lite.execute(f"DROP TRIGGER IF EXISTS journal_no_{what}")
        lite.execute(statement)


ROW_FORGERIES = {
    "state": ("state = 'failed'", "other state"),
    "result": ('result = \'{"text":"forged"}\'', "other result"),
    "tokens": ("tokens_in = tokens_in + 1", "other tokens_in"),
    "cost": ("cost = 0", "other cost"),
    "started_at": ("started_at = started_at - 60", "other started_at"),
}


@pytest.mark.parametrize("step_id", ["old", "new", "old-general", "new-again"])
@pytest.mark.parametrize(("change", "says"), ROW_FORGERIES.values(), ids=ROW_FORGERIES.keys())
def test_an_edited_row_of_either_shape_is_found(
    store_url: str, step_id: str, change: str, says: str
) -> None:
    with opened(store_url) as store:
        mixed_ledger(store)
    tamper(store_url, f"UPDATE steps SET {change} WHERE step_id = '{step_id}'")
    with opened(store_url) as store:
        report = verify(store)
    assert {p.kind for p in report.problems} - {"budget_totals"} == {"state"}, report.problems
    [problem] = [p for p in report.problems if p.kind == "state"]
    assert f"({step_id}) of run 'mixed'" in problem.message
    assert says in problem.message


_RECORD_OF = (
    "(SELECT id FROM journal WHERE run_id = 'mixed' AND event = 'recorded' AND seq = {seq})"
)


@pytest.mark.parametrize("seq", [1, 4])  # the middle of the chain, and its last step
def test_an_edited_recorded_record_breaks_the_chain_and_disagrees_with_its_row(
    store_url: str, seq: int
) -> None:
    with opened(store_url) as store:
        mixed_ledger(store)
    record = _RECORD_OF.format(seq=seq)
    tamper(store_url, f"UPDATE journal SET data = replace(data, '\"done\"', '\"failed\"') "
                      f"WHERE id = {record}")  # fmt: skip
    with opened(store_url) as store:
        report = verify(store)
        edited = store.journal("mixed", 0, 100)
    [record_id] = [e.id for e in edited if e.seq == seq]
    assert [(p.kind, p.record_id) for p in report.problems if p.kind == "broken_link"] == [
        ("broken_link", record_id)
    ]
    assert "other state" in "\n".join(p.message for p in report.problems if p.kind == "state")


def test_a_deleted_recorded_record_is_found(store_url: str) -> None:
    with opened(store_url) as store:
        mixed_ledger(store)
    tamper(store_url, f"DELETE FROM journal WHERE id = {_RECORD_OF.format(seq=1)}")
    with opened(store_url) as store:
        report = verify(store)
    kinds = {p.kind for p in report.problems}
    assert kinds == {"broken_link", "state"}, report.problems
    said = "\n".join(p.message for p in report.problems if p.kind == "state")
    assert "step 1 (new) of run 'mixed' is in the steps table but not in the journal" in said


def test_an_approval_a_recorded_step_used_cannot_be_set_back_and_used_again(
    store_url: str,
) -> None:
    """The general path uses an approval for any step that needs one; its one record names
    it, as an intent does, so a row set back to approved behind the journal lets nothing
    run and verify reports it."""
    with opened(store_url) as store:
        lease = acquire(store, "r")
        step = model(0, "ask", needs_approval=True)
        asked = store.request_approval(lease, step)
        store.decide_approval(
            "r", "ask", oncelog.ApprovalStatus.APPROVED, by="ann", expires_in=None, note=None,
            request=asked.id,
        )  # fmt: skip
        failed = Outcome(StepState.FAILED, None, '{"type":"X","message":"no"}')
        store.record_step(lease, step, None, failed)
        [record] = [e for e in store.journal("r", 0, 100) if e.event == "recorded"]
        assert record.data["approval"] == asked.id
        assert verify(store).ok
    sql(store_url, f"UPDATE approvals SET status = 'approved' WHERE id = {asked.id}")
    with opened(store_url) as store:
        with pytest.raises(oncelog.ApprovalRequired, match="already used it"):
            store.record_step(lease, step, StepState.FAILED, answered("ok"))
        said = "\n".join(p.message for p in verify(store).problems)
    assert "already used it" in said


@pytest.mark.parametrize(
    ("response", "counted"),
    [
        ({"usage": USAGE}, (11, 7, 0.01)),
        ({"usage": {"input_tokens": 3, "output_tokens": True, "cost": 2}}, (3, 1, 2.0)),
        # A name present but empty is not looked past to the other shape's.
        ({"usage": {"prompt_tokens": None, "input_tokens": 4}}, (0, 0, None)),
        ({"usage": {"prompt_tokens": "7", "completion_tokens": 2.9, "cost": "x"}}, (7, 2, None)),
        ({"usage": []}, (0, 0, None)),
        ("text", (0, 0, None)),
    ],
)
def test_a_model_calls_usage_is_read_from_either_shape(
    response: Any, counted: tuple[int, int, float | None]
) -> None:
    assert usage(response) == counted
