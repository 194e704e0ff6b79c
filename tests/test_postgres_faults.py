"""Faults of a real PostgreSQL server under real agent processes: racing workers, a worker
stopped past its lease, a backend terminated inside a transaction, a connection cut during
COMMIT, the server itself stopped and started in the middle of many runs, the server frozen
(SIGSTOP), and the agent partitioned from it.

Every test runs on a private cluster made for this module (``support/private_postgres``):
the shared server at 127.0.0.1:5432 is never stopped or frozen.

Agents are ``pg_agents/worker.py`` processes; their effects go to the provider process
(``support/provider.py``, in the mode that ignores keys, so a duplicate would show), whose
own records say how many times each effect really happened. The rule every test ends on:
every run completes (an operator resolving what is in doubt from the provider's records),
and each effect happened exactly once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

import oncelog
from oncelog import StepState

from .conftest import require
from .support import Provider, netns, read_ledger, resolve_from_provider, running_provider
from .support.commit_cutter import commit_cutter
from .support.launch import PYTHON
from .support.netns import Namespace
from .support.postgres import execute, fresh_schema
from .support.private_postgres import Cluster, missing, private_cluster

WORKER = Path(__file__).parent / "pg_agents" / "worker.py"
TIMEOUT = 60.0
EFFECTS = 3


@pytest.fixture(scope="module")
def server() -> Iterator[Cluster]:
    require(importlib.util.find_spec("psycopg") is not None, "psycopg: pip install -e '.[dev]'")
    reason = missing()
    require(reason is None, reason or "")
    with private_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_admin(server: Cluster) -> str:
    """``pg_url``'s schemas are made on this file's own server, which its tests stop."""
    return server.admin_url()


@dataclass(frozen=True)
class Exit:
    code: int
    stdout: str
    stderr: str

    def outcomes(self) -> dict[str, str]:
        lines = self.stdout.strip().splitlines()
        found: dict[str, str] = json.loads(lines[-1]) if lines else {}
        return found


def start(
    url: str, provider: Provider, runs: list[str], *extra: str, inside: Namespace | None = None
) -> subprocess.Popen[str]:
    argv = [PYTHON, str(WORKER), url, "--provider", provider.url, "--runs", ",".join(runs)]
    argv += ["--effects", str(EFFECTS), *extra]
    if inside is not None:
        argv = inside.command(argv)
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_CRASH_AT"}
    pipe = subprocess.PIPE
    return subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=env)


def finish(process: subprocess.Popen[str]) -> Exit:
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"the worker hung: {stderr[-2000:]}") from None
    return Exit(process.returncode, stdout, stderr)


def wait_until_stopped(process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        pid, status = os.waitpid(process.pid, os.WNOHANG | os.WUNTRACED)
        if pid and os.WIFSTOPPED(status):
            return
        assert not pid, f"the worker ended ({status}) instead of stopping"
        time.sleep(0.01)  # waitpid has no timeout
    raise AssertionError("the worker did not stop")


def drive_to_completion(url: str, provider: Provider, runs: list[str]) -> list[int]:
    """Run the worker as a supervisor would until every run completes: start it again
    after 75, and after 3 resolve what is in doubt from the provider's records. (The
    worker catches each run's stop; one that ran a single run exits 3 on it all the same,
    as ``run_main`` ends a process whose one run stopped for a person.)"""
    codes = []
    for _ in range(100):
        ended = finish(start(url, provider, runs))
        codes.append(ended.code)
        if ended.code in (oncelog.EXIT_COMPLETED, oncelog.EXIT_HALTED):
            assert set(ended.outcomes().values()) <= {"completed", "AmbiguousOutcome"}
            if set(ended.outcomes().values()) == {"completed"}:
                assert ended.code == oncelog.EXIT_COMPLETED, ended
                return codes
        elif ended.code != oncelog.EXIT_TRY_LATER:
            raise AssertionError(f"the worker ended with {ended}")
        for run_id, outcome in ended.outcomes().items():
            if outcome == "AmbiguousOutcome":
                resolve_from_provider(url, run_id, provider)
        time.sleep(0.1)  # as a supervisor's back-off
    raise AssertionError(f"the runs did not complete: exit codes {codes}")


def keys(run_id: str) -> set[str]:
    steps = [f"effect-{n}" for n in range(1, EFFECTS + 1)]
    return {oncelog.idempotency_key(run_id, step, "provider.create") for step in steps}


def assert_each_effect_once(url: str, provider: Provider, runs: list[str]) -> None:
    for run_id in runs:
        assert provider.counts(run_id) == Counter(dict.fromkeys(keys(run_id), 1)), run_id
        view = read_ledger(url, run_id)
        assert view.run.status is oncelog.RunStatus.COMPLETED
        assert {s.state for s in view.steps.values()} == {StepState.DONE}


def assert_intents_were_durable(provider: Provider, runs: list[str]) -> None:
    """Invariant 1: when the provider acted, the ledger already held the intent."""
    for run_id in runs:
        states = [effect.intent_state for effect in provider.effects(run_id)]
        assert states == ["in_flight"] * len(states), (run_id, states)


# -- racing workers ------------------------------------------------------------------------


def test_two_workers_racing_for_each_run_execute_each_effect_once(
    pg_url: str, provider: Provider
) -> None:
    runs = [f"race-{n}" for n in range(4)]
    for run_id in runs:
        racers = [start(pg_url, provider, [run_id]) for _ in range(2)]
        ended = [finish(racer) for racer in racers]
        for one in ended:
            assert one.code in (oncelog.EXIT_COMPLETED, oncelog.EXIT_TRY_LATER), one
            if one.code == oncelog.EXIT_TRY_LATER:
                assert "RunLeased" in one.stderr, one
        assert oncelog.EXIT_COMPLETED in [one.code for one in ended], ended
    assert_each_effect_once(pg_url, provider, runs)
    assert_intents_were_durable(provider, runs)


# -- a worker stopped past its lease -------------------------------------------------------


def test_a_worker_stopped_past_its_lease_cannot_write_after_a_takeover(
    pg_url: str, provider: Provider
) -> None:
    """P1 stops after the provider answered effect-2, before recording it. P2 takes the
    run over once the lease expired by the server's clock and halts on the effect in
    doubt; an operator resolves it from the provider; P3 completes. P1, continued, may
    record nothing: LeaseLost, exit 75."""
    zombie = start(pg_url, provider, ["r"], "--lease-ttl", "1", "--stop-after", "effect-2")
    try:
        wait_until_stopped(zombie)
        second = finish(start(pg_url, provider, ["r"], "--retry-leased", "30"))
        assert second.code == oncelog.EXIT_HALTED, second  # its one run stopped for a person
        assert second.outcomes() == {"r": "AmbiguousOutcome"}
        assert resolve_from_provider(pg_url, "r", provider) == {"effect-2": "done"}
        third = finish(start(pg_url, provider, ["r"]))
        assert third.outcomes() == {"r": "completed"}, third
    finally:
        with suppress(ProcessLookupError):
            os.kill(zombie.pid, signal.SIGCONT)
        late = finish(zombie)
    assert late.code == oncelog.EXIT_TRY_LATER, late
    assert "LeaseLost" in late.stderr
    assert_each_effect_once(pg_url, provider, ["r"])
    with oncelog.open(pg_url) as ledger:
        tokens = [e.data["token"] for e in ledger.journal("r") if e.event == "lease_acquired"]
        intents = [e.data["token"] for e in ledger.journal("r") if e.event == "intent"]
    assert tokens == [1, 2, 4]  # 3 was the operator's resolution
    assert intents == [1, 1, 4]


# -- a backend terminated inside a transaction ---------------------------------------------


def waiting_backend(server: Cluster, application_name: str) -> int:
    """The pid of the backend with that name once it waits for a lock."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        rows = execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (application_name,),
            admin=server.admin_url(),
        )
        if rows:
            return int(rows[0][0])
        time.sleep(0.02)  # pg_stat_activity cannot be waited on
    raise AssertionError(f"no backend of {application_name} waited for a lock")


def test_a_backend_terminated_inside_a_transaction_stops_the_worker_cleanly(
    server: Cluster, pg_url: str, provider: Provider
) -> None:
    """The worker's backend is terminated while its transaction recording effect-2 waits
    for the run's row (held here): the transaction is rolled back, the worker exits 75
    without calling anything more, and a restart finds the effect in doubt."""
    import psycopg

    name = f"oncelog-victim-{os.getpid()}"
    victim_url = f"{pg_url}&application_name={name}"
    worker = start(victim_url, provider, ["r"], "--stop-after", "effect-2")
    with psycopg.connect(pg_url) as blocker:
        try:
            wait_until_stopped(worker)
            blocker.execute("SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE")
            os.kill(worker.pid, signal.SIGCONT)
            backend = waiting_backend(server, name)
            execute("SELECT pg_terminate_backend(%s)", (backend,), admin=server.admin_url())
        finally:
            with suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGCONT)
            blocker.rollback()
            ended = finish(worker)
    assert ended.code == oncelog.EXIT_TRY_LATER, ended
    assert "StoreUnavailable" in ended.stderr
    view = read_ledger(pg_url, "r")
    assert view.steps["effect-2"].state is StepState.IN_FLIGHT
    assert provider.total("r") == 2
    assert drive_to_completion(pg_url, provider, ["r"])[-1] == oncelog.EXIT_COMPLETED
    assert_each_effect_once(pg_url, provider, ["r"])


# -- a connection cut during COMMIT --------------------------------------------------------

INTENT = "SELECT oncelog_intent("  # the call only an effect's intent makes
OUTCOME = "SELECT oncelog_outcome("  # ... and only its outcome


def proxied(url: str, server: Cluster, port: int) -> str:
    return url.replace(f"@127.0.0.1:{server.port}/", f"@127.0.0.1:{port}/") + "&sslmode=disable"


@pytest.mark.parametrize("committed", [False, True], ids=["lost", "durable"])
@pytest.mark.parametrize(
    ("marker", "step"), [(INTENT, "intent"), (OUTCOME, "outcome")], ids=["intent", "outcome"]
)
def test_a_commit_cut_is_read_back_before_anything_is_retried(
    server: Cluster, pg_url: str, provider: Provider, marker: str, step: str, committed: bool
) -> None:
    """The COMMIT of effect-2's intent (or outcome) is cut: before the server got it, or
    after the server committed it and before its answer arrived. The worker cannot know
    which: it stops (75) with nothing retried; the next worker reads what is durable."""
    with commit_cutter(("127.0.0.1", server.port), marker, 2, committed=committed) as cutter:
        ended = finish(start(proxied(pg_url, server, cutter.port), provider, ["r"]))
        assert cutter.cut.is_set(), ended
    assert ended.code == oncelog.EXIT_TRY_LATER, ended
    assert "outcome is unknown" in ended.stderr
    recorded = read_ledger(pg_url, "r").steps.get("effect-2")
    expected = {
        ("intent", False): None,
        ("intent", True): StepState.IN_FLIGHT,
        ("outcome", False): StepState.IN_FLIGHT,
        ("outcome", True): StepState.DONE,
    }[(step, committed)]
    assert (recorded.state if recorded else None) is expected
    # The tool ran only after a durable intent, and never again in the cut process.
    assert provider.total("r") == (1 if step == "intent" else 2)
    drive_to_completion(pg_url, provider, ["r"])
    assert_each_effect_once(pg_url, provider, ["r"])
    assert_intents_were_durable(provider, ["r"])


# -- the server stopped and started in the middle of many runs -----------------------------


RUNS = 12


def performed(provider: Provider) -> int:
    """Effects the provider has performed so far, read from its file without waiting."""
    with closing(sqlite3.connect(f"file:{provider.db_path}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT COUNT(*) FROM effects").fetchone()[0])


def test_the_server_stopped_and_started_mid_runs_loses_no_effect_and_repeats_none(
    server: Cluster, pg_url: str, tmp_path: Path
) -> None:
    """The server is stopped (immediate: no checkpoint, as a crash) right after the
    provider performed an effect, while it holds its answer back, so the worker is likely
    to find the server gone when it records the outcome; then started again."""
    with running_provider(tmp_path / "provider", "ignores_keys", delay=0.1) as provider:
        stop_and_start_the_server_under(server, pg_url, provider)


def stop_and_start_the_server_under(server: Cluster, pg_url: str, provider: Provider) -> None:
    runs = [f"many-{n}" for n in range(RUNS)]
    worker = start(pg_url, provider, runs)
    try:
        while performed(provider) < RUNS and worker.poll() is None:
            time.sleep(0.01)  # the provider's records cannot be waited on
        server.stop("immediate")
        time.sleep(0.5)  # long enough for the worker to meet the dead server
    finally:
        server.start()  # pg_ctl -w: returns once the server accepts connections
    first = finish(worker)
    assert first.code in (oncelog.EXIT_COMPLETED, oncelog.EXIT_TRY_LATER), first
    codes = drive_to_completion(pg_url, provider, runs)
    print(f"first worker: exit {first.code}, {first.outcomes()}; then exit codes {codes}")
    for run_id in runs:
        states = {effect.intent_state or "" for effect in provider.effects(run_id)}
        # The provider could not look while the server was down.
        assert {s for s in states if not s.startswith("error:")} == {"in_flight"}, states
    assert_each_effect_once(pg_url, provider, runs)


# -- a crash of the server with commits not flushed yet ------------------------------------


@contextmanager
def crash_losing_what_was_not_flushed(server: Cluster) -> Iterator[None]:
    """Yields with the WAL writer stopped, so no commit that did not wait for its flush
    reaches the disk (nothing else here flushes: no background writer, no autovacuum, a
    checkpoint just made); then kills it, which makes the server crash and recover, as
    after an OOM kill, and waits until its recovery is over."""
    admin = server.admin_url()
    for setting in ("bgwriter_lru_maxpages = 0", "autovacuum = off"):
        execute(f"ALTER SYSTEM SET {setting}", admin=admin)
    execute("SELECT pg_reload_conf()", admin=admin)
    execute("CHECKPOINT", admin=admin)
    rows = execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'", admin=admin)
    writer = int(rows[0][0])
    os.kill(writer, signal.SIGSTOP)
    try:
        yield
    finally:
        server.crash(writer)
        execute("ALTER SYSTEM RESET ALL", admin=admin)
        execute("SELECT pg_reload_conf()", admin=admin)


@pytest.mark.parametrize("durability", ["intent", "full"])
def test_a_server_crash_keeps_every_intent_and_reverts_an_unflushed_outcome_to_in_doubt(
    server: Cluster, pg_url: str, durability: Literal["intent", "full"]
) -> None:
    """An effect runs while the WAL writer is stopped; then the server crashes. With
    ``intent`` its intent is kept (it waited for its flush) and its outcome is lost (it
    did not): the process writes the run no further, and the next one finds the effect
    in doubt and halts for a person, never calling it again. With ``full`` the outcome
    is kept and the run goes on."""
    calls: list[str] = []

    def create(step: str, *, idempotency_key: str) -> str:
        calls.append(step)
        return step

    with oncelog.open(pg_url, durability=durability) as ledger:
        tool = ledger.tool(kind="create")(create)
        stopped: oncelog.StoreUnavailable | None = None
        try:
            with ledger.run("r") as run:
                run.effect("first", tool, "first")
                with crash_losing_what_was_not_flushed(server):
                    run.effect("second", tool, "second")
                run.effect("third", tool, "third")
        except oncelog.StoreUnavailable as exc:
            stopped = exc
        states = {step.step_id: step.state for step in ledger.steps("r")}
        if durability == "full":
            assert stopped is None
            assert states == dict.fromkeys(["first", "second", "third"], StepState.DONE)
            assert calls == ["first", "second", "third"]
            return
        assert stopped is not None
        assert "restarted after a crash" in str(stopped)
        assert states == {"first": StepState.DONE, "second": StepState.IN_FLIGHT}
        with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
            for step in ("first", "second", "third"):
                run.effect(step, tool, step)
        assert calls == ["first", "second"]


STORE_TIMEOUT = 2.0  # seconds: the bound the agents of the tests below run with


@pytest.mark.parametrize("outage", ["stopped", "frozen"])
def test_an_oncelog_worker_rides_out_a_server_outage(
    server: Cluster, pg_url: str, tmp_path: Path, outage: str
) -> None:
    """The real ``oncelog worker`` process, working submitted runs, meets the server
    stopped (immediate) or frozen (SIGSTOP) for longer than its store timeout, then back:
    it neither exits nor repeats an effect; it waits, claims again (its own interrupted
    run included) and finishes every run."""
    provider = tmp_path / "provider"
    provider.mkdir()
    runs = [f"job-{n}" for n in range(8)]
    with oncelog.open(pg_url) as ledger:
        for run_id in runs:
            ledger.submit(run_id, {"effects": 3, "seconds": 0.05, "kind": "upsert"})
    root = Path(__file__).parent.parent
    worker = subprocess.Popen(
        [PYTHON, "-m", "oncelog", "worker", "tests.worker_agents.handlers:handle",
         "--db", f"{pg_url}&oncelog_timeout={STORE_TIMEOUT:g}", "--poll", "0.05",
         "--lease-ttl", "2"],
        cwd=root, env={**os.environ, "WORKER_PROVIDER": str(provider)},
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(list(provider.glob("performed-*"))) < 4:
            assert time.monotonic() < deadline
            assert worker.poll() is None
            time.sleep(0.01)
        if outage == "stopped":
            server.stop("immediate")
        else:
            server.freeze()
        # Longer than its store timeout (the URL's ``oncelog_timeout``), so the worker
        # meets StoreUnavailable, not only a slow connection.
        time.sleep(STORE_TIMEOUT + 2)
    finally:
        if outage == "stopped":
            server.start()
        else:
            server.thaw()
    with oncelog.open(pg_url) as ledger:
        deadline = time.monotonic() + TIMEOUT
        while {r.status for r in ledger.runs()} != {oncelog.RunStatus.COMPLETED}:
            assert worker.poll() is None, "the worker exited instead of waiting"
            assert time.monotonic() < deadline, [
                (r.run_id, r.status, r.owner, r.reason, [s.state for s in ledger.steps(r.run_id)])
                for r in ledger.runs()
                if r.status is not oncelog.RunStatus.COMPLETED
            ]
            time.sleep(0.1)
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=TIMEOUT)
    assert worker.returncode == oncelog.EXIT_TRY_LATER, stderr
    # It met the outage: inside a run (that run stopped), or while claiming (it waited).
    assert "StoreUnavailable" in stderr or "cannot reach the ledger" in stderr, stderr
    performed = sorted(p.name for p in provider.glob("performed-*"))
    assert len(performed) == 3 * len(runs), "every effect happened, each key once"


# -- the server frozen (SIGSTOP) -----------------------------------------------------------

# A store call that meets the frozen server ends within STORE_TIMEOUT; the run then tries
# once more to record that it stopped (another call, as bounded), and the process closes
# its pool (a connection attempt in progress, as bounded). The provider may first spend
# up to 5 s looking at the ledger itself. Past this, something waited without a limit.
FROZEN_BOUND = 45.0  # far above the store timeout: only a wait without limit goes past it


def exit_within_bound(process: subprocess.Popen[str]) -> tuple[Exit, float]:
    """Its exit, and how long after now it came."""
    began = time.monotonic()
    ended = finish(process)
    return ended, time.monotonic() - began


def test_a_frozen_server_stops_the_agent_within_its_store_timeout(
    server: Cluster, pg_url: str, provider: Provider
) -> None:
    """The whole server is SIGSTOPped in the middle of a worker's runs: its kernel still
    acknowledges every packet, but nothing answers. The worker exits 75 within the bound,
    having recorded nothing twice; once the server is thawed, the runs complete with each
    effect performed once."""
    runs = [f"frozen-{n}" for n in range(4)]
    worker = start(pg_url, provider, runs, "--store-timeout", f"{STORE_TIMEOUT:g}")
    try:
        deadline = time.monotonic() + TIMEOUT
        while performed(provider) < 2 and worker.poll() is None:
            assert time.monotonic() < deadline, "the worker performed nothing"
            time.sleep(0.01)  # the provider's records cannot be waited on
        server.freeze()
        ended, took = exit_within_bound(worker)
    finally:
        server.thaw()
    assert ended.code == oncelog.EXIT_TRY_LATER, ended
    assert "StoreUnavailable" in ended.stderr, ended
    assert took < FROZEN_BOUND, (took, ended.stderr[-2000:])
    drive_to_completion(pg_url, provider, runs)
    assert_each_effect_once(pg_url, provider, runs)


# -- the agent partitioned from the server -------------------------------------------------


def test_an_agent_partitioned_from_the_server_stops_within_its_store_timeout(
    tmp_path: Path,
) -> None:
    """The agent runs in a network namespace of its own and reaches a private server over
    a veth pair; in the middle of its runs every packet between the two on the server's
    port is dropped. The agent exits 75 within the bound; once the partition heals, the
    runs complete with each effect performed once."""
    require(importlib.util.find_spec("psycopg") is not None, "psycopg: pip install -e '.[dev]'")
    reason = missing() or netns.missing()
    require(reason is None, reason or "")
    listen, trusted = ("127.0.0.1", netns.HOST_ADDRESS), (netns.HOST_ADDRESS, netns.AGENT_ADDRESS)
    with (
        netns.namespace() as inside,
        private_cluster(listen, trusted) as server,
        fresh_schema(server.admin_url()) as url,
        running_provider(tmp_path / "p", "ignores_keys", host=netns.HOST_ADDRESS) as provider,
    ):
        remote = url.replace("@127.0.0.1:", f"@{netns.HOST_ADDRESS}:", 1)
        partition_under(inside, server, remote, provider)


def partition_under(inside: Namespace, server: Cluster, url: str, provider: Provider) -> None:
    runs = [f"cut-{n}" for n in range(4)]
    worker = start(url, provider, runs, "--store-timeout", f"{STORE_TIMEOUT:g}", inside=inside)
    try:
        deadline = time.monotonic() + TIMEOUT
        while performed(provider) < 2 and worker.poll() is None:
            assert time.monotonic() < deadline, "the worker performed nothing"
            time.sleep(0.01)  # the provider's records cannot be waited on
        inside.partition(server.port)
        try:
            ended, took = exit_within_bound(worker)
        finally:
            inside.heal()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert ended.code == oncelog.EXIT_TRY_LATER, ended
    assert "StoreUnavailable" in ended.stderr, ended
    assert took < FROZEN_BOUND, (took, ended.stderr[-2000:])
    drive_to_completion(url, provider, runs)
    assert_each_effect_once(url, provider, runs)
