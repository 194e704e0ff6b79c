"""Invariant 7: bad input gets a clear, typed error and leaves the ledger consistent.

Every refusal here is checked three ways: the error's type and its ``run_id``/``step_id``/
``key`` (which must survive pickling), the provider's own call count, and the database
file read through a separate connection (``PRAGMA integrity_check`` and every row of
``runs``, ``steps`` and ``journal`` exactly as before).
"""

from __future__ import annotations

import asyncio
import math
import pickle
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

import oncelog
from oncelog.testing import FakeProvider, Refused

E = TypeVar("E", bound=oncelog.OnceLogError)
Rows = tuple[tuple[Any, ...], ...]
SendTool = oncelog.Tool[..., Any]

SMALL_LIMIT = 256


def answer(payload: Any) -> Any:
    """What the provider returns: some answers cannot be recorded, on purpose."""
    if payload == "refuse":
        raise Refused("card declined")
    return {
        "set": {1, 2},
        "nan": math.nan,
        "int keys": {1: "one"},
        "big": "x" * (SMALL_LIMIT * 4),
    }.get(payload, {"sent": payload})


def send_tool(ledger: oncelog.Ledger, fake_provider: FakeProvider) -> SendTool:
    @ledger.tool(kind="create", name="send", refusals=(Refused,))
    def send(payload: Any, *, idempotency_key: str) -> Any:
        return fake_provider.call(idempotency_key, payload)

    return send


# -- looking at the file from outside ---------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    runs: Rows
    steps: Rows
    journal: Rows


def _rows(db: sqlite3.Connection, table: str, order: str) -> Rows:
    return tuple(db.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall())


def snapshot(db_path: str) -> Snapshot:
    """Every row, read through a connection of its own; the file must be intact."""
    with closing(sqlite3.connect(db_path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return Snapshot(
            _rows(db, "runs", "run_id"),
            _rows(db, "steps", "run_id, seq"),
            _rows(db, "journal", "id"),
        )


def tamper(db_path: str, sql: str, *params: Any) -> None:
    """Edit the file behind the ledger's back, as a bad migration or a bit flip would:
    the journal's append-only triggers do not stop those."""
    with closing(sqlite3.connect(db_path)) as db:
        db.execute("DROP TRIGGER IF EXISTS journal_no_update")
        assert db.execute(sql, params).rowcount == 1
        db.commit()


def assert_round_trips(exc: oncelog.OnceLogError) -> None:
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is type(exc)
    assert (copy.message, copy.run_id, copy.step_id, copy.key) == (
        exc.message,
        exc.run_id,
        exc.step_id,
        exc.key,
    )
    assert (str(copy), copy.exit_code) == (str(exc), exc.exit_code)


@contextmanager
def refused_cleanly(db_path: str, expected: type[E]) -> Iterator[pytest.ExceptionInfo[E]]:
    """The block raises ``expected`` and leaves every row of the ledger as it was."""
    before = snapshot(db_path)
    with pytest.raises(expected) as info:
        yield info
    assert_round_trips(info.value)
    assert snapshot(db_path) == before


# -- fixtures and the agent --------------------------------------------------------------


@pytest.fixture
def fake_provider() -> FakeProvider:
    return FakeProvider(answer=answer)


@pytest.fixture
def send(ledger: oncelog.Ledger, fake_provider: FakeProvider) -> SendTool:
    return send_tool(ledger, fake_provider)


@pytest.fixture
def small(db_path: str) -> Iterator[oncelog.Ledger]:
    with oncelog.open(db_path, max_payload_bytes=SMALL_LIMIT) as opened:
        yield opened


def agent(ledger: oncelog.Ledger, send: SendTool, run_id: str) -> list[Any]:
    """Two effects, the second refused: what it returns must be the same on every replay."""
    with ledger.run(run_id, plan=["s1", "s2"]) as run:
        first = run.effect("s1", send, "hello")
        try:
            run.effect("s2", send, "refuse")
        except oncelog.EffectRefused as refused:
            return [first, refused.error_type]
    raise AssertionError("the refusal was not replayed")


# -- values that cannot be recorded ------------------------------------------------------

UNSERIALISABLE = {
    "set": {1, 2},
    "object": object(),
    "nan": math.nan,
    "infinity": [1.0, -math.inf],
    "int keys": {1: "one"},
    "nested int keys": {"a": [{"b": {2: "two"}}]},
    "bytes": b"raw",
}


@pytest.mark.parametrize("value", UNSERIALISABLE.values(), ids=UNSERIALISABLE.keys())
def test_unserialisable_arguments_are_refused_before_anything_is_written(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, db_path: str, value: Any
) -> None:
    with ledger.run("r") as run:
        with refused_cleanly(db_path, oncelog.UnserializableValue):
            run.effect("mail", send, value)
        with refused_cleanly(db_path, oncelog.UnserializableValue):
            send(value)  # a positional effect
        with refused_cleanly(db_path, oncelog.UnserializableValue):
            run.read("lookup", lambda v: v, value)
        with refused_cleanly(db_path, oncelog.UnserializableValue):
            run.llm("think", lambda v: v, value)
        assert fake_provider.requests == []
        # Nothing was recorded and no position was used: the run goes on at position 0.
        assert run.effect("mail", send, "fixed") == {"sent": "fixed"}
    assert [(s.seq, s.step_id) for s in ledger.steps("r")] == [(0, "mail")]
    with ledger.run("r") as run:
        assert run.effect("mail", send, "fixed") == {"sent": "fixed"}
    assert len(fake_provider.requests) == 1


def test_an_argument_error_names_its_run_and_step(ledger: oncelog.Ledger, send: SendTool) -> None:
    """Errors carry structured attributes (``_exceptions`` docstring): an agent with
    fifty steps needs to know which one handed over a set."""
    with ledger.run("r") as run, pytest.raises(oncelog.UnserializableValue) as refused:
        run.effect("mail", send, {1, 2})
    assert (refused.value.run_id, refused.value.step_id) == ("r", "mail")


def test_oversized_arguments_are_refused_before_the_call(
    small: oncelog.Ledger, fake_provider: FakeProvider, db_path: str
) -> None:
    send = send_tool(small, fake_provider)
    with small.run("r") as run:
        with refused_cleanly(db_path, oncelog.PayloadTooLarge) as refused:
            run.effect("mail", send, "y" * SMALL_LIMIT)
        assert str(SMALL_LIMIT) in refused.value.message
        with refused_cleanly(db_path, oncelog.PayloadTooLarge):
            run.read("lookup", len, ["z"] * SMALL_LIMIT)
        assert run.effect("mail", send, "short") == {"sent": "short"}
    assert len(fake_provider.requests) == 1


@pytest.mark.parametrize(
    ("answer", "reason"),
    [("big", oncelog.PayloadTooLarge), ("set", oncelog.UnserializableValue)],
)
def test_an_unrecordable_result_ran_once_and_never_runs_again(
    small: oncelog.Ledger,
    fake_provider: FakeProvider,
    answer: str,
    reason: type[oncelog.InvalidPayload],
) -> None:
    send = send_tool(small, fake_provider)
    for attempt in range(3):
        with small.run("r") as run:
            with pytest.raises(oncelog.ResultNotRecorded) as lost:
                run.effect("mail", send, answer)
            assert (lost.value.run_id, lost.value.step_id) == ("r", "mail")
            assert lost.value.key == oncelog.idempotency_key("r", "mail", "send")
            assert_round_trips(lost.value)
            if attempt == 0:
                assert isinstance(lost.value.__cause__, reason)
            run.effect("next", send, "after")  # the agent may carry on
    assert fake_provider.requests == [
        oncelog.idempotency_key("r", "mail", "send"),
        oncelog.idempotency_key("r", "next", "send"),
    ]
    mail = small.steps("r")[0]
    assert (mail.state, mail.attempts, mail.result_json) == (oncelog.StepState.DONE, 1, None)
    assert mail.error is not None
    assert reason.__name__ in mail.error["type"]
    assert small.in_doubt() == []
    assert small.get_run("r").status is oncelog.RunStatus.COMPLETED


@pytest.mark.parametrize(
    ("result", "expected"),
    [({"s": {1}}, oncelog.UnserializableValue), ("w" * 1000, oncelog.PayloadTooLarge)],
)
def test_a_resolution_with_an_unrecordable_result_is_refused(
    small: oncelog.Ledger,
    fake_provider: FakeProvider,
    db_path: str,
    result: Any,
    expected: type[oncelog.InvalidPayload],
) -> None:
    send = send_tool(small, fake_provider)
    with pytest.raises(oncelog.AmbiguousOutcome), small.run("r") as run:
        run.effect("mail", send, "x", oops=1)  # an unexpected TypeError: unknown
    with refused_cleanly(db_path, expected):
        small.resolve("r", "mail", "done", by="alice", result=result)
    assert small.steps("r")[0].state is oncelog.StepState.UNKNOWN


# -- names that do not exist -------------------------------------------------------------


def test_unknown_run_ids(ledger: oncelog.Ledger, send: SendTool, db_path: str) -> None:
    agent(ledger, send, "known")
    with refused_cleanly(db_path, oncelog.UnknownRun) as refused, ledger.run("nope", create=False):
        pass
    assert refused.value.run_id == "nope"
    with refused_cleanly(db_path, oncelog.UnknownRun):
        ledger.resolve("nope", "s1", "done", by="alice", result=1)
    with refused_cleanly(db_path, oncelog.UnknownRun):
        ledger.get_run("nope")
    with refused_cleanly(db_path, oncelog.UnknownRun):
        ledger.steps("nope")


def test_unknown_and_settled_steps_cannot_be_resolved(
    ledger: oncelog.Ledger, send: SendTool, db_path: str
) -> None:
    agent(ledger, send, "r")
    with refused_cleanly(db_path, oncelog.UnknownStep) as unknown:
        ledger.resolve("r", "s9", "not_done", by="alice")
    assert (unknown.value.run_id, unknown.value.step_id) == ("r", "s9")
    for step_id in ("s1", "s2"):  # done, refused
        for resolution in oncelog.Resolution:
            with refused_cleanly(db_path, oncelog.InvalidResolution) as invalid:
                ledger.resolve("r", step_id, resolution, by="alice", result=None)
            assert (invalid.value.run_id, invalid.value.step_id) == ("r", step_id)
            assert invalid.value.key == oncelog.idempotency_key("r", step_id, "send")


def test_a_resolution_that_does_not_exist_is_a_typed_error(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, db_path: str
) -> None:
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("mail", send, "x", oops=1)
    with refused_cleanly(db_path, oncelog.InvalidResolution):
        ledger.resolve("r", "mail", "maybe", by="alice")  # type: ignore[arg-type]


# -- rows damaged behind the ledger's back -----------------------------------------------


def assert_others_unaffected(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider
) -> None:
    calls = len(fake_provider.requests)
    assert agent(ledger, send, "healthy") == [{"sent": "hello"}, "Refused"]
    assert len(fake_provider.requests) == calls  # replayed, not re-run
    assert agent(ledger, send, "fresh") == [{"sent": "hello"}, "Refused"]
    assert len(fake_provider.requests) == calls + 2


def assert_only_appended(before: Snapshot, after: Snapshot) -> None:
    """The damaged row is left for a person to see: not repaired, not rewritten."""
    assert after.steps == before.steps
    assert after.journal[: len(before.journal)] == before.journal


@pytest.fixture
def two_runs(ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider) -> FakeProvider:
    for run_id in ("damaged", "healthy"):
        agent(ledger, send, run_id)
    assert len(fake_provider.requests) == 4
    return fake_provider


def test_a_result_that_does_not_decode(
    ledger: oncelog.Ledger, send: SendTool, two_runs: FakeProvider, db_path: str
) -> None:
    tamper(db_path, "UPDATE steps SET result = '{\"sent\": ' WHERE run_id = 'damaged' AND seq = 0")
    before = snapshot(db_path)
    with pytest.raises(oncelog.CorruptRecord) as corrupt:
        agent(ledger, send, "damaged")
    assert (corrupt.value.run_id, corrupt.value.step_id) == ("damaged", "s1")
    assert_round_trips(corrupt.value)
    assert len(two_runs.requests) == 4  # never "re-run because the result is unreadable"
    assert_only_appended(before, snapshot(db_path))
    assert_others_unaffected(ledger, send, two_runs)


def test_a_result_that_does_not_decode_read_through_steps(
    ledger: oncelog.Ledger, send: SendTool, two_runs: FakeProvider, db_path: str
) -> None:
    """``ledger.steps`` is what a console or a person reads: the damage must be named."""
    tamper(db_path, "UPDATE steps SET result = '{\"sent\": ' WHERE run_id = 'damaged' AND seq = 0")
    with pytest.raises(oncelog.CorruptRecord) as corrupt:
        [record.result for record in ledger.steps("damaged")]
    assert (corrupt.value.run_id, corrupt.value.step_id) == ("damaged", "s1")


def test_a_refusal_that_does_not_decode(
    ledger: oncelog.Ledger, send: SendTool, two_runs: FakeProvider, db_path: str
) -> None:
    tamper(db_path, "UPDATE steps SET error = '{oops' WHERE run_id = 'damaged' AND seq = 1")
    before = snapshot(db_path)
    with pytest.raises(oncelog.CorruptRecord) as corrupt:
        agent(ledger, send, "damaged")
    assert (corrupt.value.run_id, corrupt.value.step_id) == ("damaged", "s2")
    assert len(two_runs.requests) == 4
    assert_only_appended(before, snapshot(db_path))
    assert_others_unaffected(ledger, send, two_runs)


def test_a_state_that_does_not_exist(
    ledger: oncelog.Ledger, send: SendTool, two_runs: FakeProvider, db_path: str
) -> None:
    tamper(db_path, "UPDATE steps SET state = 'exploded' WHERE run_id = 'damaged' AND seq = 0")
    before = snapshot(db_path)
    for read in (
        lambda: ledger.steps("damaged"),
        lambda: ledger.resolve("damaged", "s1", "not_done", by="alice"),
        lambda: agent(ledger, send, "damaged"),
    ):
        with pytest.raises(oncelog.CorruptRecord) as corrupt:
            read()
        assert (corrupt.value.run_id, corrupt.value.step_id) == ("damaged", "s1")
        assert_round_trips(corrupt.value)
    assert len(two_runs.requests) == 4
    assert_only_appended(before, snapshot(db_path))
    assert_others_unaffected(ledger, send, two_runs)


@pytest.mark.parametrize(
    "plan",
    ['["s1", ', "5", "null]", '"s1s2"', '{"s1": 1, "s2": 2}', "[1, 2]", '["s1", "s1"]', '[""]'],
)
def test_a_plan_that_does_not_decode(
    ledger: oncelog.Ledger, send: SendTool, two_runs: FakeProvider, db_path: str, plan: str
) -> None:
    tamper(db_path, "UPDATE runs SET plan = ? WHERE run_id = 'damaged'", plan)
    for read in (
        lambda: ledger.get_run("damaged"),
        lambda: agent(ledger, send, "damaged"),
        lambda: ledger.run("damaged", plan=lambda: ["s1", "s2"]).__enter__(),
    ):
        with refused_cleanly(db_path, oncelog.CorruptRecord) as corrupt:
            read()
        assert corrupt.value.run_id == "damaged"
    assert len(two_runs.requests) == 4
    assert_others_unaffected(ledger, send, two_runs)


def test_a_journal_entry_that_does_not_decode(
    ledger: oncelog.Ledger, send: SendTool, two_runs: FakeProvider, db_path: str
) -> None:
    tamper(
        db_path,
        "UPDATE journal SET data = 'garbage' WHERE id = "
        "(SELECT MIN(id) FROM journal WHERE run_id = 'damaged')",
    )
    with refused_cleanly(db_path, oncelog.CorruptRecord) as corrupt:
        ledger.journal("damaged")
    assert corrupt.value.run_id == "damaged"
    assert [e.event for e in ledger.journal("healthy")][:2] == ["run_created", "lease_acquired"]
    assert_others_unaffected(ledger, send, two_runs)


# -- plans and step ids ------------------------------------------------------------------


def test_a_plan_with_duplicate_ids_is_refused(ledger: oncelog.Ledger, db_path: str) -> None:
    for plan in (["a", "b", "a"], ["a", ""]):
        with refused_cleanly(db_path, oncelog.ConfigurationError), ledger.run("r", plan=plan):
            pass
    with pytest.raises(oncelog.UnknownRun):
        ledger.get_run("r")


def test_another_plan_for_an_existing_run(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, db_path: str
) -> None:
    agent(ledger, send, "r")
    with (
        refused_cleanly(db_path, oncelog.PlanMismatch) as mismatch,
        ledger.run("r", plan=["s2", "s1"]),
    ):
        pass
    assert mismatch.value.run_id == "r"
    assert ledger.get_run("r").plan == ("s1", "s2")
    with ledger.run("r", plan=["s1", "s2", "s3"], replace_plan=True) as run:
        assert run.plan == ("s1", "s2", "s3")
        assert run.effect("s1", send, "hello") == {"sent": "hello"}
        with pytest.raises(oncelog.EffectRefused):
            run.effect("s2", send, "refuse")
        run.effect("s3", send, "new step")
    replaced = [e.data for e in ledger.journal("r") if e.event == "plan_replaced"]
    assert replaced == [{"old": ["s1", "s2"], "new": ["s1", "s2", "s3"]}]
    assert len(fake_provider.requests) == 3


def test_a_step_outside_the_plan(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, db_path: str
) -> None:
    with ledger.run("r", plan=["s1"]) as run:
        with refused_cleanly(db_path, oncelog.StepNotInPlan) as outside:
            run.effect("improvised", send, "x")
        assert (outside.value.run_id, outside.value.step_id) == ("r", "improvised")
        run.effect("s1", send, "x")
    assert fake_provider.requests == [oncelog.idempotency_key("r", "s1", "send")]
    with ledger.run("r", plan=["s1"]) as run:  # the same code replays the same way
        with pytest.raises(oncelog.StepNotInPlan):
            run.effect("improvised", send, "x")
        run.effect("s1", send, "x")
    assert len(fake_provider.requests) == 1


def test_a_step_id_used_twice(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, db_path: str
) -> None:
    for _ in range(2):  # the same code meets the same refusal on replay
        with ledger.run("r") as run:
            assert run.effect("mail", send, "first") == {"sent": "first"}
            with refused_cleanly(db_path, oncelog.DuplicateStep) as duplicate:
                run.effect("mail", send, "second")
        assert (duplicate.value.run_id, duplicate.value.step_id) == ("r", "mail")
    with ledger.run("reads") as run:
        run.read("look", len, "first")
        with refused_cleanly(db_path, oncelog.DuplicateStep):
            run.read("look", len, "second")
    assert len(fake_provider.requests) == 1
    [mail] = ledger.steps("r")
    assert (mail.state, mail.result) == (oncelog.StepState.DONE, {"sent": "first"})


# -- mistakes in the calling code --------------------------------------------------------


def test_a_tool_called_outside_a_run(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, db_path: str
) -> None:
    with refused_cleanly(db_path, oncelog.NoActiveRun):
        send("x")
    agent(ledger, send, "r")
    with refused_cleanly(db_path, oncelog.NoActiveRun):  # after a run has ended, too
        send("x")
    assert len(fake_provider.requests) == 2


def test_an_undecorated_function_as_an_effect(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, db_path: str
) -> None:
    with ledger.run("r") as run:
        not_tools: tuple[Any, ...] = (send.fn, print, lambda: None)
        for not_a_tool in not_tools:
            with refused_cleanly(db_path, oncelog.NotATool) as refused:
                run.effect("mail", not_a_tool)
            assert (refused.value.run_id, refused.value.step_id) == ("r", "mail")
        run.effect("mail", send, "x")  # no position was used up
    assert [s.seq for s in ledger.steps("r")] == [0]
    assert fake_provider.requests == [oncelog.idempotency_key("r", "mail", "send")]


def test_bogus_configuration(ledger: oncelog.Ledger, tmp_path: Path, db_path: str) -> None:
    before = snapshot(db_path)
    with pytest.raises(oncelog.ConfigurationError):
        ledger.tool(kind="mutate")(print)  # type: ignore[arg-type]
    with pytest.raises(oncelog.ConfigurationError):
        ledger.tool(kind="create", drift="ignore")(print)  # type: ignore[arg-type]
    for url in ("ftp://host/ledger.db", "sqlite://", "postgresql://localhost/agents?bogus=1"):
        with pytest.raises(oncelog.ConfigurationError):
            oncelog.open(url)
    target = str(tmp_path / "other.db")
    with pytest.raises(oncelog.ConfigurationError):
        oncelog.open(target, durability="sometimes")  # type: ignore[arg-type]
    with pytest.raises(oncelog.ConfigurationError):
        oncelog.open(target, lease_ttl=0)
    with pytest.raises(oncelog.ConfigurationError):
        oncelog.open(target, max_payload_bytes=-1)
    for run_id in ("", "r" * 513, 4711):
        with pytest.raises(oncelog.ConfigurationError):
            ledger.run(run_id)  # type: ignore[arg-type]
    with pytest.raises(oncelog.ConfigurationError):
        ledger.resolve("r", "s", "done", by="")
    assert snapshot(db_path) == before


def test_a_file_that_is_not_a_ledger(tmp_path: Path) -> None:
    junk = tmp_path / "notes.db"
    junk.write_bytes(b"these are my notes, not a database\n" * 200)
    content = junk.read_bytes()
    with pytest.raises(oncelog.StoreError) as refused:
        oncelog.open(str(junk))
    assert_round_trips(refused.value)
    assert junk.read_bytes() == content  # never "initialised" over someone's file
    with pytest.raises(oncelog.StoreError):
        oncelog.open(str(tmp_path))  # a directory


def test_a_damaged_page(ledger: oncelog.Ledger, send: SendTool, db_path: str) -> None:
    for n in range(3):
        agent(ledger, send, f"r{n}")
    ledger.close()
    with closing(sqlite3.connect(db_path)) as db:
        [(root,)] = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'steps'")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    with open(db_path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\x42" * page_size)

    def open_and_read() -> None:  # the damage may show at open or at the first read
        with oncelog.open(db_path) as reopened:
            reopened.steps("r0")

    with pytest.raises(oncelog.StoreError) as damaged:
        open_and_read()
    assert_round_trips(damaged.value)


# -- the hierarchy -----------------------------------------------------------------------

PUBLIC_ERRORS = [
    obj
    for obj in (getattr(oncelog, name) for name in oncelog.__all__)
    if isinstance(obj, type) and issubclass(obj, BaseException)
]


@pytest.mark.parametrize("error", PUBLIC_ERRORS, ids=lambda e: e.__name__)
def test_every_error_is_a_oncelog_error_and_pickles(error: type[BaseException]) -> None:
    assert issubclass(error, oncelog.OnceLogError)
    exc = error("it broke", run_id="r", step_id="s", key="ol1_k")
    assert_round_trips(exc)
    assert str(exc) == "it broke"  # the fields are shown beside it, not as a repr tail
    assert {"run_id": "r", "step_id": "s"}.items() <= exc.fields().items()
    assert oncelog.exit_code_for(exc) == exc.exit_code


def test_a_refusal_keeps_its_error_type_through_pickling() -> None:
    exc = oncelog.EffectRefused("no", run_id="r", step_id="s", key="k", error_type="Declined")
    copy = pickle.loads(pickle.dumps(exc))
    assert copy.error_type == "Declined"
    assert_round_trips(copy)


# -- values nested too deeply, strings UTF-8 cannot hold, empty step ids (both stores) --


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def contents(ledger: oncelog.Ledger) -> tuple[Any, ...]:
    """Everything the ledger holds, read through the API (so on PostgreSQL too)."""
    runs = sorted((r.run_id, r.status, r.next_seq) for r in ledger.runs(limit=1000))
    steps = [tuple(s) for run in runs for s in ledger.steps(run[0])]
    return runs, steps, [(e.id, e.event) for e in ledger.iter_journal()]


@contextmanager
def refused_on_any_store(
    ledger: oncelog.Ledger, expected: type[E]
) -> Iterator[pytest.ExceptionInfo[E]]:
    before = contents(ledger)
    with pytest.raises(expected) as info:
        yield info
    assert_round_trips(info.value)
    assert contents(ledger) == before


@pytest.mark.parametrize("kind", ["create", "upsert"])
def test_a_result_nested_a_thousand_deep_is_done_but_not_recorded(
    ledger: oncelog.Ledger, kind: str
) -> None:
    """The call succeeded: it is never made again, on any restart, whatever its kind."""
    calls: list[str] = []

    @ledger.tool(kind=oncelog.Kind(kind), name="deep")
    def deep(*, idempotency_key: str) -> Any:
        calls.append(idempotency_key)
        return {"tree": nested(1000)}

    for _ in range(3):
        with ledger.run("r") as run:
            with pytest.raises(oncelog.ResultNotRecorded) as lost:
                run.effect("make", deep)
            assert (lost.value.run_id, lost.value.step_id) == ("r", "make")
            assert "nested more than" in lost.value.message
            assert_round_trips(lost.value)
    assert len(calls) == 1
    [step] = ledger.steps("r")
    assert (step.state, step.attempts, step.result_json) == (oncelog.StepState.DONE, 1, None)
    assert step.error is not None
    assert "UnserializableValue" in step.error["type"]
    assert ledger.in_doubt() == []
    assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED


def test_deep_values_within_the_bound_are_recorded_and_replayed(ledger: oncelog.Ledger) -> None:
    deep = nested(oncelog_depth() - 3)  # the call's {"args": [...]} wraps it twice more
    with ledger.run("r") as run:
        assert run.read("look", lambda v: v, deep) == deep
    with ledger.run("r") as run:
        assert run.read("look", lambda v: v, deep) == deep


def oncelog_depth() -> int:
    from oncelog.records._serialization import MAX_DEPTH

    return MAX_DEPTH


@pytest.mark.parametrize("depth", [201, 1000, 100_000])
def test_deeply_nested_arguments_are_refused_before_anything_is_written(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, depth: int
) -> None:
    with ledger.run("r") as run:
        with refused_on_any_store(ledger, oncelog.UnserializableValue) as refused:
            run.effect("mail", send, nested(depth))
        assert (refused.value.run_id, refused.value.step_id) == ("r", "mail")
        with refused_on_any_store(ledger, oncelog.UnserializableValue):
            run.llm("think", lambda v: v, nested(depth))
        with refused_on_any_store(ledger, oncelog.UnserializableValue):
            ledger.submit("queued", nested(depth))
        assert run.effect("mail", send, "fine") == {"sent": "fine"}
    assert len(fake_provider.requests) == 1


def test_a_secret_tool_with_deep_arguments_is_refused_too(
    store_url: str, fake_provider: FakeProvider
) -> None:
    with oncelog.open(store_url, redaction_key=b"k" * 32) as ledger:

        @ledger.tool(kind="create", secret=("card",))
        def pay(card: Any, *, idempotency_key: str) -> Any:
            fake_provider.call(idempotency_key, card)
            return nested(1000)

        with ledger.run("r") as run:
            with refused_on_any_store(ledger, oncelog.UnserializableValue):
                run.effect("pay", pay, {"x": nested(1000)})
            with pytest.raises(oncelog.ResultNotRecorded):
                run.effect("pay", pay, "4242")
    assert len(fake_provider.requests) == 1


SURROGATE = "a\udc80b"  # what os.fsdecode makes of a byte that is not UTF-8


def test_a_result_with_a_lone_surrogate_is_done_but_not_recorded(ledger: oncelog.Ledger) -> None:
    calls: list[str] = []

    @ledger.tool(kind="create", name="name_file")
    def name_file(*, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return SURROGATE

    for _ in range(2):
        with ledger.run("r") as run, pytest.raises(oncelog.ResultNotRecorded) as lost:
            run.effect("name", name_file)
        assert "lone surrogate" in lost.value.message
    assert len(calls) == 1


def test_lone_surrogates_are_refused_before_anything_is_written(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider
) -> None:
    with ledger.run("r") as run:
        run.effect("mail", send, "first")
    refusals: list[tuple[type[oncelog.OnceLogError], Any]] = [
        (oncelog.ConfigurationError, lambda: ledger.run(SURROGATE).__enter__()),
        (oncelog.ConfigurationError, lambda: ledger.run("r2", agent=SURROGATE).__enter__()),
        (oncelog.ConfigurationError, lambda: ledger.run("r2", plan=["a", SURROGATE]).__enter__()),
        (oncelog.ConfigurationError, lambda: ledger.submit(SURROGATE)),
        (oncelog.UnserializableValue, lambda: ledger.submit("r3", {"name": SURROGATE})),
        (oncelog.ConfigurationError, lambda: ledger.halt("why", by=SURROGATE)),
        (oncelog.ConfigurationError, lambda: ledger.halt(SURROGATE, by="alice")),
        (oncelog.ConfigurationError, lambda: ledger.halt("why", by="alice", run=SURROGATE)),
        (oncelog.ConfigurationError, lambda: ledger.halt("why", by="alice", agent=SURROGATE)),
        (oncelog.ConfigurationError, lambda: ledger.set_budget("r", None, by=SURROGATE)),
        (oncelog.ConfigurationError, lambda: ledger.approve("r", SURROGATE, by="alice")),
        (oncelog.ConfigurationError, lambda: ledger.deny("r", "mail", by="a", note=SURROGATE)),
        (oncelog.ConfigurationError, lambda: ledger.get_run(SURROGATE)),
        (
            oncelog.ConfigurationError,
            lambda: ledger.resolve("r", "mail", "not_done", by="alice", note=SURROGATE),
        ),
    ]
    refusals.append(
        (oncelog.ConfigurationError, lambda: ledger.tool(kind="create", name=SURROGATE)(len))
    )
    for expected, attempt in refusals:
        with refused_on_any_store(ledger, expected):
            attempt()
    with ledger.run("r") as run:
        run.effect("mail", send, "first")  # replayed
        for step in (
            lambda: run.effect(SURROGATE, send, "x"),
            lambda: run.read("q", len, SURROGATE),
        ):
            with refused_on_any_store(ledger, oncelog.OnceLogError) as refused:
                step()
            assert "lone surrogate" in refused.value.message
            assert refused.value.run_id == "r"
        run.effect("next", send, "second")  # no position was used
    assert [s.seq for s in ledger.steps("r")] == [0, 1]
    assert len(fake_provider.requests) == 2


@pytest.mark.parametrize("step_id", ["", "a\x00b", "x" * 513, 7])
def test_a_step_id_that_cannot_name_a_step(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider, step_id: Any
) -> None:
    with ledger.run("r") as run:
        for step in (
            lambda: run.effect(step_id, send, "x"),
            lambda: run.read(step_id, len, "x"),
            lambda: run.llm(step_id, len, "x"),
        ):
            with refused_on_any_store(ledger, oncelog.ConfigurationError) as refused:
                step()
            assert refused.value.run_id == "r"
        assert run.effect("mail", send, "x") == {"sent": "x"}  # no position was used
    assert [s.seq for s in ledger.steps("r")] == [0]
    assert len(fake_provider.requests) == 1


def test_an_empty_step_id_is_refused_in_async_runs_too(
    ledger: oncelog.Ledger, send: SendTool, fake_provider: FakeProvider
) -> None:
    async def agent() -> None:
        async with ledger.run("r") as run:
            with refused_on_any_store(ledger, oncelog.ConfigurationError):
                await run.effect("", send, "x")

    asyncio.run(agent())
    assert fake_provider.requests == []


def test_a_refusal_whose_message_holds_a_lone_surrogate_is_recorded(
    ledger: oncelog.Ledger,
) -> None:
    calls: list[str] = []

    @ledger.tool(kind="create", name="upload", refusals=(Refused,))
    def upload(*, idempotency_key: str) -> None:
        calls.append(idempotency_key)
        raise Refused(f"no such file: {SURROGATE}")

    for _ in range(2):
        with ledger.run("r") as run, pytest.raises(oncelog.EffectRefused) as refused:
            run.effect("up", upload)
        assert "no such file: a" in refused.value.message
    assert len(calls) == 1
    [step] = ledger.steps("r")
    assert step.state is oncelog.StepState.FAILED
    assert step.error == {
        "type": f"{Refused.__module__}.Refused",
        "message": "no such file: a\\udc80b",
    }
