"""Attacks on what a retry policy, a deduplication window and a probe promise across
process kills: a crash loop neither resets nor hastens a retry; a window is measured from
the key's first send, however many kills and resends followed it, and by the store's clock,
whatever the worker's says; a probe is asked as soon as a call fails in doubt.

The agent (``attack_agents/flaky.py``) has one payment whose tool notes the time and key
of every attempt before anything else: what the provider saw, not what the ledger says.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

from .conftest import require
from .support.flaky_agent import FLAKY, flaky, tries_made
from .support.launch import environment, python
from .support.postgres import POSTGRES_REASON, fresh_schema, postgres_is_up

# Debian's faketime package, wherever its multiarch folder puts it.
LIBFAKETIMES = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))


def charge_step(store_url: str) -> oncelog.StepRecord:
    with oncelog.open(store_url) as ledger:
        [step] = ledger.steps("r")
        assert ledger.verify().ok
    return step


def test_a_crash_loop_in_the_backoff_neither_hastens_nor_resets_the_retry(
    store_url: str, tmp_path: Path
) -> None:
    """The first attempt is not performed, with 1.5 s until the next; the process dies just
    after recording that, and every restart is SIGKILLed while it waits. The next attempt
    still comes no sooner than the recorded time, and counts as the second."""
    tries, options = tmp_path / "tries", ("--fail-first", "1", "--backoff", "1.5")
    code, out = flaky(store_url, tries, *options, crash_at="after_outcome_commit@charge")
    assert code == -signal.SIGKILL, out
    failed = charge_step(store_url)
    assert (failed.state, failed.attempts) == (oncelog.StepState.NOT_DONE, 1)
    assert failed.retry_at is not None
    [first] = tries_made(tries)
    assert failed.retry_at >= first.at + 1.5
    for _ in range(3):  # each killed while it waits for the recorded time
        waiter = subprocess.Popen(python(FLAKY, store_url, "r", tries, *options),
                                  env=environment(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(0.3)
        waiter.kill()
        waiter.wait(timeout=60)
        assert len(tries_made(tries)) == 1, "an attempt was made before its time"
    code, out = flaky(store_url, tries, *options)
    assert code == 0, out
    first_try, second = tries_made(tries)
    assert second.key == first_try.key
    assert second.at >= failed.retry_at
    done = charge_step(store_url)
    assert (done.state, done.attempts) == (oncelog.StepState.DONE, 2)


def test_killed_resends_never_stretch_the_window_past_the_first_send(
    store_url: str, tmp_path: Path
) -> None:
    """Killed after each call, the payment is sent again with the same key while its first
    send is inside the 3 s window; once that has passed, the next start halts for a person
    and sends nothing, however recent the last resend was."""
    tries, window = tmp_path / "tries", 3.0
    options = ("--dedupe-window", str(window))
    code, out = flaky(store_url, tries, *options, crash_at="after_call@charge")
    assert code == -signal.SIGKILL, out
    [first] = tries_made(tries)
    deadline = first.at + window
    while time.time() < deadline:
        code, out = flaky(store_url, tries, *options, crash_at="after_call@charge")
        assert code in (-signal.SIGKILL, oncelog.EXIT_HALTED), out
        if code == oncelog.EXIT_HALTED:
            break
    for _ in range(2):
        code, out = flaky(store_url, tries, *options)
        assert code == oncelog.EXIT_HALTED, out
        assert "AmbiguousOutcome" in out
    made = tries_made(tries)
    assert len(made) >= 2, "no resend happened inside the window"
    assert {t.key for t in made} == {first.key}
    halted = charge_step(store_url)
    assert (halted.state, halted.attempts) == (oncelog.StepState.UNKNOWN, len(made))
    assert halted.first_sent_at <= first.at


def test_a_resend_that_never_left_keeps_the_step_in_doubt_past_the_window(
    store_url: str, tmp_path: Path
) -> None:
    """Killed after the provider charged, the payment is in doubt; its resend inside the
    window meets a refused connection (certainly not performed). That says nothing of the
    first send: the step stays in doubt, and once the window has passed the next start
    halts for a person and sends nothing. (Recorded not done, as it was, the step was sent
    again as new after the window: a second charge the provider no longer deduplicated.)"""
    tries, window = tmp_path / "tries", 30.0  # the resend must start inside it
    options = ("--dedupe-window", str(window), "--not-sent-try", "2")
    code, out = flaky(store_url, tries, *options, crash_at="after_call@charge")
    assert code == -signal.SIGKILL, out
    [first] = tries_made(tries)
    code, out = flaky(store_url, tries, *options)
    assert len(tries_made(tries)) == 2, out
    assert code == oncelog.EXIT_TRY_LATER, out  # resend later: still in doubt, in its window
    assert charge_step(store_url).state in (oncelog.StepState.IN_FLIGHT,
                                            oncelog.StepState.UNKNOWN)  # fmt: skip
    past_the_window(first.at, window)
    for _ in range(2):
        code, out = flaky(store_url, tries, *options)
        assert code == oncelog.EXIT_HALTED, out
        assert "AmbiguousOutcome" in out
    assert [t.key for t in tries_made(tries)] == [first.key, first.key]


def behind(seconds: float) -> dict[str, str]:
    """The environment of a process whose clocks (Python's and SQLite's) read ``seconds``
    behind this one's: libfaketime, preloaded."""
    require(bool(LIBFAKETIMES), "libfaketime is not installed (apt-get install faketime)")
    return {"LD_PRELOAD": str(LIBFAKETIMES[0]), "FAKETIME": f"-{seconds:g}s"}


def past_the_window(first_send: float, window: float) -> None:
    """Wait, by this process's clock, until the provider no longer deduplicates the key:
    the provider's clock is the subject here."""
    time.sleep(max(0.0, first_send + window + 0.2 - time.time()))


def test_a_clock_behind_the_first_send_never_resends(store_url: str, tmp_path: Path) -> None:
    """The payment's first send is killed before its answer. Once the provider's 1 s window
    has passed, the agent starts again with its clock 3 s behind: on PostgreSQL a worker
    lagging the server, on SQLite the machine clock stepped back. By the worker's clock the
    key is younger than its window (its age even negative); by the store's it is past it,
    or on SQLite its first send lies in the clock's future: its age is unknown. The run
    halts for a person and the provider is sent nothing more."""
    tries, window = tmp_path / "tries", 1.0
    options = ("--dedupe-window", str(window))
    code, out = flaky(store_url, tries, *options, crash_at="after_call@charge")
    assert code == -signal.SIGKILL, out
    [first] = tries_made(tries)
    past_the_window(first.at, window)
    code, out = flaky(store_url, tries, *options, **behind(3.0))
    assert code == oncelog.EXIT_HALTED, out
    assert len(tries_made(tries)) == 1, "sent again past the provider's window"
    assert charge_step(store_url).state is oncelog.StepState.UNKNOWN


@pytest.fixture
def postgres_url() -> Iterator[str]:
    require(postgres_is_up(), POSTGRES_REASON)
    with fresh_schema() as url:
        yield url


def test_a_worker_lagging_the_server_never_resends_past_the_window(
    postgres_url: str, tmp_path: Path
) -> None:
    """The same with a worker 1 s behind the PostgreSQL server: by its clock the key is
    still inside its 1 s window, by the server's (which wrote the first send) it is not."""
    tries, window = tmp_path / "tries", 1.0
    options = ("--dedupe-window", str(window))
    code, out = flaky(postgres_url, tries, *options, crash_at="after_call@charge")
    assert code == -signal.SIGKILL, out
    [first] = tries_made(tries)
    past_the_window(first.at, window)
    code, out = flaky(postgres_url, tries, *options, **behind(1.0))
    assert code == oncelog.EXIT_HALTED, out
    assert len(tries_made(tries)) == 1, "sent again past the provider's window"


def test_a_call_failing_in_doubt_asks_the_declared_probe(store_url: str, tmp_path: Path) -> None:
    """A create whose call is performed but loses its answer: its probe finds it at the
    provider at once, so the run completes in the same start, with the provider's answer,
    and nothing is sent again."""
    tries = tmp_path / "tries"
    code, out = flaky(store_url, tries, "--kind", "create", "--lose-answer", "1", "--probe")
    assert code == 0, out
    [made] = tries_made(tries)
    assert f'"key": "{made.key}"' in out
    done = charge_step(store_url)
    assert (done.state, done.attempts) == (oncelog.StepState.DONE, 1)
