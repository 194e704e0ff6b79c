"""An agent-wide kill switch stops each of its runs for a person: each run's notice has an
id of its own, so that a receiver that drops a notice whose id it has seen (the usual
de-duplication of a webhook) still hears of every halted run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import oncelog

from .support.receiver import Receiver, receiving

RUNS = ("r1", "r2", "r3")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


def test_each_run_stopped_by_an_agent_switch_gets_a_notice_of_its_own(
    store_url: str, receiver: Receiver
) -> None:
    with oncelog.open(store_url, alert_webhook=receiver.url) as ledger:

        @ledger.tool(kind="read", name="look")
        def look(*, idempotency_key: str) -> str:
            return "seen"

        for run_id in RUNS:
            with ledger.run(run_id, agent="billing"):
                look()
        ledger.halt("fraud review", by="bob", agent="billing")
        for run_id in RUNS:
            with pytest.raises(oncelog.RunHalted), ledger.run(run_id, agent="billing"):
                look()  # replayed
                look()  # a new step: the switch stops it

    deduplicated = {str(body["id"]): body for body in receiver.bodies}
    assert sorted(str(body["run_id"]) for body in deduplicated.values()) == list(RUNS)
