"""Attacks on what a retry policy and a deduplication window promise across process kills:
a crash loop neither resets nor hastens a retry, and a window is measured from the key's
first send, however many kills and resends followed it.

The agent (``attack_agents/flaky.py``) has one payment whose tool notes the time and key
of every attempt before anything else: what the provider saw, not what the ledger says.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import oncelog

from .support.flaky_agent import FLAKY, flaky, tries_made
from .support.launch import environment, python


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
