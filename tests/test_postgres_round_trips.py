"""Round trips to PostgreSQL per step, counted on the wire (exact, not timed): an effect
costs two, its intent's call and its outcome's; a read or model call one, its record (one
call, one journal record): the look at the kill switch before it runs (so a halted agent
spends nothing) is answered from the switches kept in memory (``_postgres_halts``, whose
listening connection is counted apart), and the record does not look again. The steps
that need the store's Python logic (a halt, an agent's budget) take its transaction
instead and raise what they always raised."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

import oncelog
from oncelog import StepState
from oncelog.stores import _postgres_halts, _postgres_pool
from oncelog.stores._postgres_settings import session_settings

from .conftest import require
from .support.postgres import ADMIN_URL, POSTGRES_REASON, execute, fresh_schema, postgres_is_up
from .support.round_trips import RoundTrips


@pytest.fixture(autouse=True)
def steady_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The switches in memory are read again only when a notification says so: the
    reading once a second (``PING``) would send the steps it overlaps to the server."""
    monkeypatch.setattr(_postgres_halts, "PING", 3600.0)
    monkeypatch.setattr(_postgres_halts, "TRUST", 3600.0)


def _trusted(ledger: oncelog.Ledger) -> None:
    """Wait until the store's switches in memory may be trusted (its thread listens)."""
    watch = ledger.store.halt_watch  # type: ignore[attr-defined]
    ledger.store.active_halt("", None)  # the first look starts the thread, if none did
    deadline = time.monotonic() + 10
    while watch.switches_on() is None:
        assert time.monotonic() < deadline, "the kill switches were never kept in memory"
        time.sleep(0.005)


@pytest.fixture
def proxy() -> Iterator[tuple[RoundTrips, str]]:
    require(postgres_is_up(), POSTGRES_REASON)
    where = urlsplit(ADMIN_URL)
    server = (where.hostname or "", where.port or 5432)
    with fresh_schema() as url, RoundTrips(server) as counted:
        yield counted, counted.url(url)


def _send(n: int, *, idempotency_key: str) -> int:
    return n


def test_an_effect_is_two_round_trips(proxy: tuple[RoundTrips, str]) -> None:
    rt, url = proxy
    # A lease that needs no heartbeat during the test: the count is the steps' alone.
    with oncelog.open(url, lease_ttl=3600) as ledger:
        send = ledger.tool(kind="create", name="send")(_send)
        with ledger.run("r") as run:
            for n in range(8):  # the statements prepared (psycopg: at their 5th run)
                run.effect(f"warm-{n}", send, n)
                run.read(f"warm-read-{n}", len, "abc")
            _trusted(ledger)
            for n in range(5):
                before = rt.count
                assert run.effect(f"send-{n}", send, n) == n
                assert rt.count - before == 2
                before = rt.count
                assert run.read(f"read-{n}", len, "abc") == 3
                assert rt.count - before == 1  # its record; the kill switch is in memory
                before = rt.count
                run.llm(f"ask-{n}", lambda: {"text": "ok", "usage": {"prompt_tokens": 3}})
                assert rt.count - before == 1  # the same for a model call
        assert {e.event for e in ledger.journal("r") if e.seq is not None} == {
            "intent", "outcome", "recorded",
        }  # fmt: skip
        assert ledger.verify().ok  # the chain the server hashed is the one Python checks


def test_a_session_writing_floats_short_takes_the_stores_way_with_a_true_hash(
    proxy: tuple[RoundTrips, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # With extra_float_digits at 0 PostgreSQL writes a time with 15 digits, not as Python
    # does: the server's hash would be wrong. The functions hand the step back (OL000) and
    # the store's transaction records it, hashed in Python.
    rt, url = proxy
    monkeypatch.setattr(
        "oncelog.stores._postgres_pool.session_settings",
        lambda timeout, **how: session_settings(timeout, **how) + "; SET extra_float_digits = 0",
    )
    with oncelog.open(url, lease_ttl=3600) as ledger:
        send = ledger.tool(kind="create", name="send")(_send)
        with ledger.run("r") as run:
            for n in range(8):
                run.effect(f"warm-{n}", send, n)
            _trusted(ledger)
            before = rt.count
            assert run.effect("send", send, 1) == 1
            assert rt.count - before > 2  # the functions' calls, then the transaction
            before = rt.count
            assert run.read("look", len, "abc") == 3
            assert rt.count - before > 1  # the function's call, then the transaction
        # The transaction records the read as the function would have: one record.
        assert [e.event for e in ledger.journal("r") if e.seq == 9] == ["recorded"]
        assert ledger.verify().ok


def test_a_halt_found_by_the_intents_call_stops_the_step_as_before(
    proxy: tuple[RoundTrips, str],
) -> None:
    _, url = proxy
    with oncelog.open(url) as ledger:
        send = ledger.tool(kind="create", name="send")(_send)
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.effect("one", send, 1)
            ledger.halt("a loop", agent="billing", by="ops")
            run.effect("two", send, 2)
        assert [s.step_id for s in ledger.steps("r")] == ["one"]


def test_a_read_that_ran_while_a_halt_was_set_is_recorded_in_one_round_trip() -> None:
    """The kill switch is looked at once for a read or a model call, before it runs (in
    memory): a halt set while it ran (by another ledger, not through the proxy) lets its
    result, already paid for, be recorded in the record's one round trip, and stops the
    next step."""
    require(postgres_is_up(), POSTGRES_REASON)
    where = urlsplit(ADMIN_URL)
    with (
        fresh_schema() as url,
        RoundTrips((where.hostname or "", where.port or 5432)) as rt,
        oncelog.open(rt.url(url), lease_ttl=3600) as ledger,
        oncelog.open(url) as operator,
    ):

        def halting(text: str) -> int:
            operator.halt("a loop", agent="billing", by="ops")
            return len(text)

        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            for n in range(8):
                run.read(f"warm-{n}", len, "abc")
            _trusted(ledger)
            before = rt.count
            assert run.read("paid", halting, "abc") == 3
            assert rt.count - before == 1  # its record (the look before it ran: in memory)
            run.read("next", len, "abc")
        steps = ledger.steps("r")
        assert [s.step_id for s in steps][-1] == "paid"
        assert steps[-1].state is StepState.DONE
        assert ledger.verify().ok


def _terminate_backends(application_name: str) -> None:
    execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (application_name,),
    )
    while execute(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    ):
        time.sleep(0.01)  # a backend's exit cannot be waited on


def test_a_pooled_connection_the_server_closed_is_replaced_without_a_round_trip() -> None:
    """The pool looks at a connection before handing it out without asking the server
    anything; one whose backend was terminated while idle (as by a server restart) is
    replaced, and the effect after it is recorded as usual. Directly, not through the
    proxy: the backend's farewell reaches the client before the backend is gone."""
    require(postgres_is_up(), POSTGRES_REASON)
    name = f"oncelog-replaced-{os.getpid()}"
    with fresh_schema() as url, oncelog.open(f"{url}&application_name={name}") as ledger:
        send = ledger.tool(kind="create", name="send")(_send)
        with ledger.run("r") as run:
            run.effect("one", send, 1)
            _terminate_backends(name)
            assert run.effect("two", send, 2) == 2
        assert [s.state for s in ledger.steps("r")] == [StepState.DONE] * 2


def test_a_transaction_whose_begin_meets_a_broken_connection_begins_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Should a broken connection pass the look (it broke right after it), its BEGIN
    fails before anything was written, and the transaction begins on a fresh one."""
    require(postgres_is_up(), POSTGRES_REASON)
    look = _postgres_pool._closed_by_server
    missed: list[object] = []

    def misses_once(conn: Any) -> bool:
        if not missed and look(conn):
            missed.append(conn)
            return False
        return look(conn)

    monkeypatch.setattr(_postgres_pool, "_closed_by_server", misses_once)
    name = f"oncelog-begin-{os.getpid()}"
    with fresh_schema() as url, oncelog.open(f"{url}&application_name={name}") as ledger:
        with ledger.run("r"):
            pass
        _terminate_backends(name)
        with ledger.run("r"):  # acquiring it is a transaction, its BEGIN the first use
            pass
        assert missed, "no broken connection was handed out"
        assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED
