"""Attacks on "one approval lets through at most one attempt" where a step has more than
one attempt: an upsert in doubt after a SIGKILL (called again by its kind), and a payment
whose first attempt was certainly not performed (called again by its retry policy). Each
further attempt waits for an approval of its own.
"""

from __future__ import annotations

import signal
from pathlib import Path

import oncelog

from .support import oncelog_cli
from .support.flaky_agent import flaky, tries_made


def approvals_used(store_url: str) -> list[object]:
    """The approval each intent used, in order, from the journal."""
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok
        return [e.data.get("approval") for e in ledger.journal("r") if e.event == "intent"]


def test_an_upsert_called_again_after_a_kill_needs_a_new_approval(
    store_url: str, tmp_path: Path
) -> None:
    tries, options = tmp_path / "tries", ("--kind", "upsert", "--approval")
    assert flaky(store_url, tries, *options)[0] == oncelog.EXIT_WAITING
    oncelog_cli(store_url, "approve", "r", "charge", "--by", "alice")
    code, out = flaky(store_url, tries, *options, crash_at="after_call@charge")
    assert code == -signal.SIGKILL, out
    assert len(tries_made(tries)) == 1
    for _ in range(2):  # in doubt, an upsert goes again: but not on the used approval
        code, out = flaky(store_url, tries, *options)
        assert code == oncelog.EXIT_WAITING, out
        assert len(tries_made(tries)) == 1
    oncelog_cli(store_url, "approve", "r", "charge", "--by", "bob")
    code, out = flaky(store_url, tries, *options)
    assert code == 0, out
    first, second = tries_made(tries)
    assert first.key == second.key
    used = approvals_used(store_url)
    assert len(used) == len(set(used)) == 2


def test_a_retry_after_a_refused_connection_needs_a_new_approval(
    store_url: str, tmp_path: Path
) -> None:
    tries = tmp_path / "tries"
    options = ("--approval", "--fail-first", "1", "--backoff", "0")
    assert flaky(store_url, tries, *options)[0] == oncelog.EXIT_WAITING
    oncelog_cli(store_url, "approve", "r", "charge", "--by", "alice")
    code, out = flaky(store_url, tries, *options)  # not performed; the retry must ask
    assert code == oncelog.EXIT_WAITING, out
    assert len(tries_made(tries)) == 1
    oncelog_cli(store_url, "approve", "r", "charge", "--by", "bob")
    code, out = flaky(store_url, tries, *options)
    assert code == 0, out
    assert len(tries_made(tries)) == 2
    with oncelog.open(store_url) as ledger:
        [step] = ledger.steps("r")
    assert (step.state, step.attempts) == (oncelog.StepState.DONE, 2)
    used = approvals_used(store_url)
    assert len(used) == len(set(used)) == 2
