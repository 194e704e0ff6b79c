"""The kill switches a PostgreSQL store keeps in memory (``_postgres_halts``), against the
real server: a model call's look at them is answered without a round trip only while the
memory is shown not to be behind; lost, never made, behind or stale, the look asks the
server, and a halt set anywhere stops the next model call. Halts are set here by another
connection (plain SQL, the trigger announcing them) or another process (the CLI), never
through a store of this process, which would make every store here forget at once."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import oncelog
from oncelog.stores import _postgres_halts, _postgres_pool
from oncelog.stores._postgres_halts import HaltWatch

from .conftest import require
from .support.operator_commands import oncelog_cli
from .support.postgres import POSTGRES_REASON, execute, fresh_schema, postgres_is_up

WAIT = 10.0  # seconds a test waits for what takes milliseconds


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh ledger's URL; the switches are read again only when a notification says
    so (an hourly ``PING``), so nothing but what a test does refreshes them."""
    require(postgres_is_up(), POSTGRES_REASON)
    monkeypatch.setattr(_postgres_halts, "PING", 3600.0)
    monkeypatch.setattr(_postgres_halts, "TRUST", 3600.0)
    with fresh_schema() as fresh:
        yield fresh


def _ask() -> dict[str, Any]:
    return {"text": "ok", "usage": {"prompt_tokens": 3}}


class _Model:
    """A model that counts its calls: a stopped call never reaches it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return _ask()


def _watch(ledger: oncelog.Ledger) -> HaltWatch:
    watch = ledger.store.halt_watch  # type: ignore[attr-defined]
    assert isinstance(watch, HaltWatch)
    return watch


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.002)


def _trusted(ledger: oncelog.Ledger) -> HaltWatch:
    watch = _watch(ledger)
    _until(lambda: watch.switches_on() is not None, "the switches kept in memory")
    return watch


def _halt_by_sql(url: str, agent: str) -> None:
    """A switch set by another connection, as another process's ``set_halt`` inserts it."""
    execute(
        "INSERT INTO halts (scope, target, reason, set_by, set_at) "
        "VALUES ('agent', %s, 'a loop', 'ops', 0)",
        (agent,),
        admin=url,
    )


def test_a_model_call_looks_at_the_switches_in_memory_and_a_halt_heard_stops_the_next(
    url: str,
) -> None:
    model = _Model()
    with oncelog.open(url) as ledger:
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("warm", _ask)
            watch = _trusted(ledger)
            assert watch.covers_none("r", "billing")
            _halt_by_sql(url, "billing")
            _until(
                lambda: watch.switches_on() == frozenset({("agent", "billing")}), "the halt heard"
            )
            assert not watch.covers_none("r", "billing")
            assert watch.covers_none("other", "sales")  # a switch covers only its runs
            run.llm("stopped", model)
        assert model.calls == 0
        assert [s.step_id for s in ledger.steps("r")] == ["warm"]


def test_a_halt_committed_just_after_the_listeners_read_is_heard(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LISTEN first, then the read: a switch set right after the read (before the memory
    is trusted) is announced on a channel already listened to. Read first and LISTEN
    after, it would be in neither, and the memory would say "no halt" for an hour."""
    read = _postgres_halts.read_switches
    reads: list[int] = []

    def then_a_halt(conn: Any) -> frozenset[tuple[str, str]]:
        found = read(conn)
        if not reads:
            _halt_by_sql(url, "billing")
        reads.append(len(found))
        return found

    monkeypatch.setattr(_postgres_halts, "read_switches", then_a_halt)
    model = _Model()
    with oncelog.open(url) as ledger:
        watch = _watch(ledger)
        ledger.store.active_halt("r", "billing")  # the first look starts the listener
        _until(lambda: watch.switches_on() == frozenset({("agent", "billing")}), "the halt heard")
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("stopped", model)
        assert model.calls == 0
    assert reads[0] == 0
    assert len(reads) >= 2


def test_a_listener_whose_backend_was_terminated_sends_the_look_to_the_server(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pg_terminate_backend from another connection, its connection kept from being made
    again, then a halt: the next model call stops (the server is asked). Once it may
    connect again it listens, and reads the halt."""
    name = f"oncelog-halts-lost-{os.getpid()}"
    connect = _postgres_pool.connect
    allowed = threading.Event()
    allowed.set()

    def gated(*args: Any) -> Any:
        if not allowed.is_set():
            raise oncelog.StoreUnavailable("kept from connecting by the test")
        return connect(*args)

    monkeypatch.setattr(_postgres_halts, "connect", gated)
    model = _Model()
    with oncelog.open(f"{url}&application_name={name}") as ledger:
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("warm", _ask)
            watch = _trusted(ledger)
            allowed.clear()
            [(terminated,)] = execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                "application_name = %s AND query LIKE 'SELECT scope, target FROM halts%%'",
                (name,),
            )
            assert terminated
            _until(lambda: watch.switches_on() is None, "the listener's loss seen")
            _halt_by_sql(url, "billing")
            run.llm("stopped", model)
        assert model.calls == 0
        allowed.set()
        _until(lambda: watch.switches_on() == frozenset({("agent", "billing")}), "listening again")


def test_a_listener_that_cannot_connect_sends_every_look_to_the_server(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any) -> Any:
        raise oncelog.StoreUnavailable("kept from connecting by the test")

    monkeypatch.setattr(_postgres_halts, "connect", refused)
    model = _Model()
    with oncelog.open(url) as ledger:
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("one", _ask)
            watch = _watch(ledger)
            time.sleep(0.05)  # the thread has tried
            assert watch.switches_on() is None
            assert not watch.covers_none("r", "billing")
            _halt_by_sql(url, "billing")
            run.llm("stopped", model)
        assert model.calls == 0


class _StalledPolls:
    """``select`` for the listener's thread, whose waits (a poll with a timeout) hang
    until ``go`` is set: a thread that does not run. A look's own poll (timeout 0)
    is the real one. Set going again when its block ends."""

    POLLIN = select.POLLIN

    def __init__(self) -> None:
        self.go = threading.Event()

    def __enter__(self) -> _StalledPolls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.go.set()

    def poll(self) -> Any:
        real, go = select.poll(), self.go

        class Poller:
            def register(self, fd: int, events: int) -> None:
                real.register(fd, events)

            def poll(self, timeout: float) -> list[tuple[int, int]]:
                if timeout:
                    go.wait()
                return real.poll(timeout)

        return Poller()


def test_a_notification_not_taken_in_yet_sends_the_look_to_the_server(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread is behind (it does not run): the notification waits on its socket, and
    the look, which sees it there, asks the server."""
    model = _Model()
    with oncelog.open(url) as ledger, _StalledPolls() as stalled:
        monkeypatch.setattr(_postgres_halts, "select", stalled)
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("warm", _ask)
            watch = _trusted(ledger)
            _halt_by_sql(url, "billing")
            _until(lambda: watch.switches_on() is None, "the notification arrived")
            assert watch._view is not None  # the thread has not taken it in
            run.llm("stopped", model)
        assert model.calls == 0
        stalled.go.set()
        _until(lambda: watch.switches_on() == frozenset({("agent", "billing")}), "caught up")


def test_a_read_older_than_the_trust_is_not_relied_on(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A halt no notification announces (the trigger disabled: as a connection that died
    without its socket saying so) is found once the last read is ``TRUST`` old."""
    model = _Model()
    with oncelog.open(url) as ledger, _StalledPolls() as stalled:
        monkeypatch.setattr(_postgres_halts, "select", stalled)
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("warm", _ask)
            watch = _trusted(ledger)
            execute("ALTER TABLE halts DISABLE TRIGGER halts_changed", admin=url)
            _halt_by_sql(url, "billing")
            assert watch.covers_none("r", "billing")  # unannounced: within the trust
            monkeypatch.setattr(_postgres_halts, "TRUST", 0.2)
            _until(lambda: watch.switches_on() is None, "the trust over")
            run.llm("stopped", model)
        assert model.calls == 0


def test_a_ledger_whose_halts_announce_nothing_is_never_kept_in_memory(url: str) -> None:
    oncelog.open(url).close()
    execute("DROP TRIGGER halts_changed ON halts", admin=url)
    model = _Model()
    with oncelog.open(url) as ledger:
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("one", _ask)
            watch = _watch(ledger)
            thread = watch._thread
            _until(lambda: thread is not None and not thread.is_alive(), "given up")
            assert watch.switches_on() is None
            assert watch._thread is thread
            _halt_by_sql(url, "billing")
            run.llm("stopped", model)
        assert model.calls == 0


def test_a_halt_set_in_this_process_stops_the_next_call_without_a_notification(
    url: str,
) -> None:
    """Every store of the process forgets what it read when one of them sets a switch:
    no notification needed (the trigger is disabled here)."""
    model = _Model()
    with oncelog.open(url) as ledger, oncelog.open(url) as operator:
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            run.llm("warm", _ask)
            watch = _trusted(ledger)
            execute("ALTER TABLE halts DISABLE TRIGGER halts_changed", admin=url)
            operator.halt("a loop", agent="billing", by="ops")
            assert not watch.covers_none("r", "billing")
            run.llm("stopped", model)
        assert model.calls == 0


def test_the_cli_in_another_process_stops_the_next_model_call_of_a_running_agent(
    url: str,
) -> None:
    model = _Model()
    with oncelog.open(url) as ledger:
        with pytest.raises(oncelog.RunHalted), ledger.run("r", agent="billing") as run:
            for n in range(3):
                run.llm(f"ask-{n}", _ask)
            watch = _trusted(ledger)
            assert watch.covers_none("r", "billing")  # the calls so far: from memory
            oncelog_cli(url, "halt", "--agent", "billing", "--reason", "a loop", "--by", "ops")
            run.llm("stopped", model)
        assert model.calls == 0
        assert [s.step_id for s in ledger.steps("r")] == ["ask-0", "ask-1", "ask-2"]


def test_closing_the_store_ends_its_listener(url: str) -> None:
    name = f"oncelog-halts-closed-{os.getpid()}"
    with oncelog.open(f"{url}&application_name={name}") as ledger:
        ledger.store.active_halt("r", None)
        _trusted(ledger)
        assert execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (name,))
    _until(
        lambda: not execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (name,)),
        "every backend of the closed store gone",
    )
