"""A stop for a person is recorded and announced when it happens (issue 41, item 5), not
when the agent's process leaves cleanly: against real agent processes
(``tests/stop_agents/swallower.py``) whose code swallows the stop (``except
BaseException: sys.exit(0)``, or returns), a real HTTP webhook that keeps what it was
sent, and the provider process, which counts what it performed.

Whatever the code does with the stop, the run is recorded stopped for a person, exactly
one notice reaches the webhook, and ``run_main`` exits with the stop's code; restarts page
nobody again and perform nothing; a process killed between the stop's record and its
notice leaves the notice to the restart that meets the stop.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

from .support.launch import environment, python
from .support.provider_process import Provider
from .support.receiver import Receiver, receiving

AGENT = Path(__file__).parent / "stop_agents" / "swallower.py"
RUN = "r1"

# scenario -> the error the person is told of, the run's status, run_main's exit code,
# and what the provider performed of the stopped step
STOPS = {
    "ambiguous": ("AmbiguousOutcome", oncelog.RunStatus.HALTED, oncelog.EXIT_HALTED, 1),
    "approval": ("ApprovalRequired", oncelog.RunStatus.WAITING, oncelog.EXIT_WAITING, 0),
    "switch": ("RunHalted", oncelog.RunStatus.HALTED, oncelog.EXIT_HALTED, 0),
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


def swallower(
    store_url: str, provider: Provider, receiver: Receiver, scenario: str, catch: str,
    *flags: str, crash_at: str | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The agent, run to its end; the webhook has what it sent once it has ended."""
    return subprocess.run(
        python(AGENT, store_url, RUN, provider.url, receiver.url, scenario, catch, *flags),
        env=environment(crash_at), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def status(store_url: str) -> oncelog.RunStatus:
    with oncelog.open(store_url) as ledger:
        return ledger.get_run(RUN).status


def notices(receiver: Receiver) -> list[tuple[object, object]]:
    return [(body["error"], body["run_id"]) for body in receiver.bodies]


def switch_on(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        ledger.halt("audit", by="bob", run=RUN, ahead=True)


@pytest.mark.parametrize("catch", ["exit_inside", "exit_outside", "return"])
@pytest.mark.parametrize("scenario", sorted(STOPS))
def test_a_swallowed_stop_is_recorded_announced_once_and_exits_with_its_code(
    store_url: str, provider: Provider, receiver: Receiver, scenario: str, catch: str
) -> None:
    error, stopped, code, performed = STOPS[scenario]
    if scenario == "switch":
        switch_on(store_url)
    restarts = 3 if (scenario, catch) == ("ambiguous", "exit_inside") else 1
    for start in range(1 + restarts):
        ended = swallower(store_url, provider, receiver, scenario, catch)
        assert "swallowed" in ended.stdout, ended.stdout + ended.stderr  # the code caught it
        assert ended.returncode == code, (start, ended.returncode, ended.stderr)
        assert status(store_url) is stopped, start
        assert notices(receiver) == [(error, RUN)], start  # once, at the first start
        assert provider.total(RUN) == performed, start  # a restart performs nothing


def test_without_run_main_the_stop_is_recorded_and_announced(
    store_url: str, provider: Provider, receiver: Receiver
) -> None:
    """Nothing of oncelog's runs at the process's end: its exit code is the code's own
    (``sys.exit(0)``), but the ledger and the person know."""
    for _ in range(2):
        ended = swallower(store_url, provider, receiver, "ambiguous", "exit_inside", "--bare")
        assert ended.returncode == 0, ended.stderr
        assert status(store_url) is oncelog.RunStatus.HALTED
        assert notices(receiver) == [("AmbiguousOutcome", RUN)]
        assert provider.total(RUN) == 1


@pytest.mark.parametrize("catch", ["exit_inside", "return"])
def test_an_async_run_that_swallows_its_stop(
    store_url: str, provider: Provider, receiver: Receiver, catch: str
) -> None:
    for _ in range(2):
        ended = swallower(store_url, provider, receiver, "ambiguous", catch, "--async")
        assert ended.returncode == oncelog.EXIT_HALTED, ended.stderr
        assert status(store_url) is oncelog.RunStatus.HALTED
        assert notices(receiver) == [("AmbiguousOutcome", RUN)]
        assert provider.total(RUN) == 1


@pytest.mark.parametrize("scenario", ["ambiguous", "approval"])
def test_killed_between_the_stop_and_its_notice_the_restart_announces_it_once(
    store_url: str, provider: Provider, receiver: Receiver, scenario: str
) -> None:
    error, stopped, code, performed = STOPS[scenario]
    killed = swallower(
        store_url, provider, receiver, scenario, "exit_inside", crash_at="after_stop_commit"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "swallowed" not in killed.stdout  # killed before the code saw the stop
    assert notices(receiver) == []  # the stop is recorded, not yet announced
    for start in range(3):
        ended = swallower(store_url, provider, receiver, scenario, "exit_inside")
        assert ended.returncode == code, (start, ended.stderr)
        assert status(store_url) is stopped
        assert notices(receiver) == [(error, RUN)], start
        assert provider.total(RUN) == performed
