"""A payment with a probe, SIGKILLed in every window where its outcome is unknown: the
restarted agent asks the provider (a separate process) instead of halting, and each
payment happens once."""

from __future__ import annotations

from pathlib import Path

import pytest

import oncelog
from oncelog import StepState

from .support import AgentSetup, read_ledger, run_agent, running_provider

STEP = "effect-2"
# (how it dies, what the probe finds, attempts recorded in the end)
WINDOWS = [
    pytest.param({"crash_at": f"after_intent_commit@{STEP}"}, 2, id="before-the-call"),
    pytest.param({"kill_before_answer": STEP}, 1, id="provider-acted-no-answer"),
    pytest.param({"crash_at": f"after_call@{STEP}"}, 1, id="answered-not-recorded"),
    pytest.param({"crash_at": f"before_outcome_commit@{STEP}"}, 1, id="outcome-not-committed"),
]


@pytest.mark.parametrize("mode", ["honours_keys", "ignores_keys"])
@pytest.mark.parametrize(("kill", "attempts"), WINDOWS)
def test_probe_settles_a_killed_payment(
    tmp_path: Path, mode: str, kill: dict[str, str], attempts: int
) -> None:
    with running_provider(tmp_path / "provider", mode) as provider:
        setup = AgentSetup(tmp_path / "ledger.db", "pay-run", provider.url,
                           kinds=("create", "payment", "create"), probe=True)  # fmt: skip
        first = run_agent(
            setup, crash_at=kill.get("crash_at"), kill_before_answer=kill.get("kill_before_answer")
        )
        assert first.killed, first
        again = run_agent(setup)
        assert again.returncode == 0, again  # the probe decided; no person needed
        counts = provider.counts("pay-run")
        steps = read_ledger(setup.ledger, "pay-run").steps
        assert sorted(counts.values()) == [1, 1, 1]  # even at a provider that ignores keys
        assert set(counts) == {steps[step].key for step in setup.effect_steps}
        payment = steps[STEP]
        assert (payment.state, payment.attempts) == (StepState.DONE, attempts)
        assert payment.result == provider.first_response("pay-run", payment.key)
        assert again.results()[STEP] == payment.result
        with oncelog.open(str(setup.ledger)) as ledger:
            events = [e.event for e in ledger.journal("pay-run") if e.seq == payment.seq]
        assert ("probed" in events) is (attempts == 1)
