"""The async twins behave as the sync API does."""

from __future__ import annotations

import asyncio

import pytest

import oncelog


def test_async_run_replays_and_orders_concurrent_steps(ledger: oncelog.Ledger) -> None:
    calls: list[str] = []

    @ledger.tool(kind="create", name="notify")
    async def notify(who: str, *, idempotency_key: str) -> str:
        calls.append(who)
        await asyncio.sleep(0)
        return f"sent {who}"

    @ledger.tool(kind="upsert", name="save")
    def save(value: int, *, idempotency_key: str) -> int:
        calls.append(f"save {value}")
        return value

    async def agent() -> list[object]:
        async with ledger.run("r") as run:
            first = await run.effect("first", notify, "a")
            both = await asyncio.gather(notify("b"), notify("c"))
            saved = save(3)  # a sync tool called directly in an async run
            model = await run.llm("model", lambda: {"usage": {"prompt_tokens": 1}})
            return [first, *both, saved, model]

    first = asyncio.run(agent())
    second = asyncio.run(agent())
    assert first == second == ["sent a", "sent b", "sent c", 3, {"usage": {"prompt_tokens": 1}}]
    assert sorted(calls) == ["a", "b", "c", "save 3"]
    assert [s.step_id for s in ledger.steps("r")] == [
        "first",
        "notify@1",
        "notify@2",
        "save@3",
        "model",
    ]


def test_async_unknown_effect_halts(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="payment", name="charge")
    async def charge(cents: int, *, idempotency_key: str) -> None:
        raise ConnectionResetError("lost the answer")

    async def agent() -> None:
        async with ledger.run("r") as run:
            await run.effect("charge", charge, 500)

    with pytest.raises(oncelog.AmbiguousOutcome):
        asyncio.run(agent())
    with pytest.raises(oncelog.AmbiguousOutcome):
        asyncio.run(agent())
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
    assert ledger.steps("r")[0].attempts == 1


def test_async_tool_in_a_sync_run_is_refused(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="create", name="notify")
    async def notify(*, idempotency_key: str) -> None:
        return None

    with pytest.raises(oncelog.UsageError, match="async with"), ledger.run("r") as run:
        _never_awaited = run.effect("n", notify)
    assert ledger.steps("r") == []
