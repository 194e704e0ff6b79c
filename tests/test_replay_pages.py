"""Replay reads recorded steps a page (512) at a time and decodes a page's arguments and
results together: every edge of that must replay exactly as one step at a time would.
A page with a damaged row, a NULL result or a step asked with other arguments at a
page's first position; the async path, which replays on the event loop."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import oncelog
from tests.test_approval_binding import tamper

STEPS = 1100  # three pages: 0-511, 512-1023, 1024-1099


def value(i: int) -> dict[str, Any]:
    return {"i": i, "text": f"row {i}"}


class Agent:
    """Reads ``STEPS`` values, counting the real calls: a replay makes none."""

    def __init__(self, ledger: oncelog.Ledger) -> None:
        self.ledger = ledger
        self.calls = 0

    def ask(self, i: int, note: str) -> dict[str, Any]:
        self.calls += 1
        return value(i)

    def run(self, changed: int | None = None) -> list[Any]:
        with self.ledger.run("r") as run:
            return [
                run.read(f"q{i}", self.ask, i, note="other" if i == changed else "same")
                for i in range(STEPS)
            ]

    async def run_async(self) -> list[Any]:
        async with self.ledger.run("r") as run:
            # Taken in call order, awaited together: positions are handed out at the call.
            steps = [run.read(f"q{i}", self.ask, i, note="same") for i in range(STEPS)]
            return list(await asyncio.gather(*steps))


def recorded(ledger: oncelog.Ledger) -> Agent:
    agent = Agent(ledger)
    assert agent.run() == [value(i) for i in range(STEPS)]
    assert agent.calls == STEPS
    agent.calls = 0
    return agent


@pytest.mark.parametrize("seq", [0, 300, 511, 512, 1099])
def test_a_result_that_does_not_decode_names_its_step_wherever_it_is_on_its_page(
    ledger: oncelog.Ledger, store_url: str, seq: int
) -> None:
    """One text that is not one JSON value (a fragment, or two values) fails the page's
    single decode: the page is decoded row by row and the damaged step is named."""
    agent = recorded(ledger)
    damaged = '{"i": ' if seq % 2 else "1,2"
    tamper(store_url, "UPDATE steps SET result = ? WHERE run_id = 'r' AND seq = ?", (damaged, seq))
    with pytest.raises(oncelog.CorruptRecord) as corrupt:
        agent.run()
    assert (corrupt.value.run_id, corrupt.value.step_id) == ("r", f"q{seq}")
    assert agent.calls == 0  # never "run again because the result is unreadable"


def test_arguments_that_do_not_decode_mid_page_replay_by_their_hash(
    ledger: oncelog.Ledger, store_url: str
) -> None:
    """Damaged arguments text on a done step: the whole record decides it, as it did one
    step at a time (the recorded hash still matches the arguments asked for)."""
    agent = recorded(ledger)
    tamper(store_url, "UPDATE steps SET args = '{\"args\":[' WHERE run_id = 'r' AND seq = 700")
    assert agent.run() == [value(i) for i in range(STEPS)]
    assert agent.calls == 0


def test_a_done_step_without_a_result_mid_page_replays_no_result(
    ledger: oncelog.Ledger, store_url: str
) -> None:
    """A done step recorded without the provider's answer (NULL) hands back NO_RESULT,
    and its page's other steps their own results, in order."""
    agent = recorded(ledger)
    tamper(store_url, "UPDATE steps SET result = NULL WHERE run_id = 'r' AND seq IN (5, 600)")
    replayed = agent.run()
    assert replayed[5] is oncelog.NO_RESULT
    assert replayed[600] is oncelog.NO_RESULT
    assert [v for i, v in enumerate(replayed) if i not in (5, 600)] == [
        value(i) for i in range(STEPS) if i not in (5, 600)
    ]
    assert agent.calls == 0


@pytest.mark.parametrize("seq", [511, 512, 1024])
def test_other_arguments_at_a_page_edge_are_a_drift(
    ledger: oncelog.Ledger, seq: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The first position of a page is read through the whole path: other arguments
    there are found as anywhere else (a read's drift policy warns and replays)."""
    agent = recorded(ledger)
    with caplog.at_level(logging.WARNING, "oncelog"):
        assert agent.run(changed=seq) == [value(i) for i in range(STEPS)]
    assert f"step 'q{seq}' was recorded with other arguments" in caplog.text
    assert caplog.text.count("other arguments") == 1
    assert agent.calls == 0


def test_an_async_run_replays_every_page_without_calling(ledger: oncelog.Ledger) -> None:
    agent = recorded(ledger)
    assert asyncio.run(agent.run_async()) == [value(i) for i in range(STEPS)]
    assert agent.calls == 0
    assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED


def test_a_run_that_stops_early_on_a_later_page_is_a_divergence(
    ledger: oncelog.Ledger,
) -> None:
    agent = recorded(ledger)
    with pytest.raises(oncelog.ReplayDivergence) as diverged, ledger.run("r") as run:
        for i in range(600):
            run.read(f"q{i}", agent.ask, i, note="same")
    assert diverged.value.step_id == "q600"
    assert "finished after 600 steps" in str(diverged.value)
    assert agent.calls == 0


def test_an_effect_in_doubt_mid_page_stops_the_replay_there(ledger: oncelog.Ledger) -> None:
    """A page's rows carry one flag for done without an error: the steps before a step in
    another state replay from the page, and that step is decided whole (in doubt: a
    person is asked, the tool is not called again)."""
    calls: list[int] = []

    @ledger.tool(kind="create", name="send")
    def send(i: int, *, idempotency_key: str) -> dict[str, int]:
        calls.append(i)
        if i == 600:
            raise ValueError("the provider timed out")
        return {"i": i}

    for _ in range(2):
        with pytest.raises(oncelog.AmbiguousOutcome) as doubt, ledger.run("r") as run:
            for i in range(STEPS):
                assert run.effect(f"e{i}", send, i) == {"i": i}
        assert doubt.value.step_id == "e600"
    assert calls == list(range(601))


def test_steps_asked_in_another_order_mid_page_are_a_divergence(ledger: oncelog.Ledger) -> None:
    """A page lines each step's values up with its position: the step recorded next is
    not replayed in the place of the one recorded here."""
    agent = recorded(ledger)
    with pytest.raises(oncelog.ReplayDivergence) as diverged, ledger.run("r") as run:
        for i in [*range(700), 701, 700]:
            run.read(f"q{i}", agent.ask, i, note="same")
    assert diverged.value.step_id == "q701"
    assert agent.calls == 0


@pytest.mark.parametrize("name", ["q\x1f{}", "q\x10{}", "q\x10\x10{}", "é{}"])
def test_names_holding_a_separator_or_an_escape_replay(ledger: oncelog.Ledger, name: str) -> None:
    """Names are joined on a page by U+001F (a name holding it breaks its column, and
    the page is read row by row), and PostgreSQL stores DLE escaped."""
    calls: list[int] = []

    def ask(i: int) -> int:
        calls.append(i)
        return i

    for _ in range(2):
        with ledger.run("r") as run:
            assert [
                run.read(name.format(i), ask, i, name=name.format("t")) for i in range(600)
            ] == list(range(600))
    assert calls == list(range(600))


def test_a_position_left_unrecorded_mid_page_runs_alone(
    ledger: oncelog.Ledger, store_url: str
) -> None:
    """A page with a gap (a write that failed left its position unrecorded) is read row by
    row: the gap's step runs, every other step replays."""
    agent = recorded(ledger)
    tamper(store_url, "DELETE FROM steps WHERE run_id = 'r' AND seq = 300")
    assert agent.run() == [value(i) for i in range(STEPS)]
    assert agent.calls == 1


def test_a_connection_set_to_reverse_unordered_selects_still_finds_a_divergence(
    tmp_path: Path,
) -> None:
    """SQLite's page lists its steps in the order it visits them: the primary key's, which
    this pragma would reverse (to debug code that relies on an order SQLite does not
    promise). Reversed, the first position would hold the last step's values."""
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        agent = Agent(ledger)
        with ledger.run("r") as run:
            for i in range(5):
                run.read(f"q{i}", agent.ask, i, note="same")
        ledger.store._db.execute("PRAGMA reverse_unordered_selects = ON")  # type: ignore[attr-defined]
        with pytest.raises(oncelog.ReplayDivergence) as diverged, ledger.run("r") as run:
            run.read("q4", agent.ask, 4, note="same")
    assert diverged.value.step_id == "q4"
    assert agent.calls == 5
