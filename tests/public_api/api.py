"""The public API as a user writes it, type-checked by ``mypy --strict`` (the ``tests``
folder is in the mypy configuration's files) and never run: a public name that loses its
types, or a signature that stops accepting what users write, fails the type check.

Only ``oncelog`` and its public modules are imported here; no private module.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import oncelog
from oncelog import markers, providers, testing


@oncelog.tool(kind="create", name="send_email")
def send_email(to: str, *, idempotency_key: str) -> dict[str, str]:
    return {"id": idempotency_key, "to": to}


def find_email(to: str, *, idempotency_key: str) -> oncelog.ProbeAnswer:
    return oncelog.Found({"id": idempotency_key, "to": to}) if to else oncelog.NOT_FOUND


@oncelog.tool(
    kind=oncelog.Kind.PAYMENT,
    probe=find_email,
    dedupe_window=timedelta(hours=24),
    retry=oncelog.Retry(attempts=3, backoff=0.5),
    approval=True,
    cost=lambda amount, **_: float(amount),
    secret=("card",),
    result_schema={"type": "object"},
)
def charge(amount: int, card: str, *, idempotency_key: str) -> str:
    return f"{idempotency_key}:{amount}"


def lookup(customer: str) -> list[str]:
    return [customer]


def a_run(ledger: oncelog.Ledger) -> str:
    with ledger.run("ticket-1", plan=["lookup", "email"], agent="support") as run:
        found: list[str] = run.read("lookup", lookup, "ada")
        sent: dict[str, str] = run.effect("email", send_email, found[0])
        assert run.run_id == "ticket-1"
        return sent["id"]


def named_calls(ledger: oncelog.Ledger) -> str | None:
    """A caller whose steps are named and asked for on their own (a gateway)."""
    known: oncelog.StepRecord | None = ledger.step("ticket-1", "email")
    if known is not None:
        return known.result_json
    with ledger.run("ticket-1") as run:
        first: int = run.skip_settled(before=None)
        for step in ledger.steps("ticket-1", start=first):
            print(step.step_id)
        sent: dict[str, str] = run.effect("email", send_email, "ada")
        return sent["id"]


async def an_async_run(ledger: oncelog.Ledger) -> str:
    async with ledger.run("ticket-2", budget=oncelog.Budget(steps=10, cost=5.0)) as run:
        sent: dict[str, str] = await run.effect("email", send_email, "ada")
        return sent["to"]


def a_person_decides(ledger: oncelog.Ledger) -> None:
    for step in ledger.in_doubt():
        record: oncelog.StepRecord = ledger.resolve(
            step.run_id, step.step_id, "done", by="alice", result={"id": "x"}
        )
        assert record.state is oncelog.StepState.DONE
    ledger.resolve("r", "s", oncelog.Resolution.NOT_DONE, by="alice", note="checked")
    ledger.resolve("r", "s", "done", by="alice", result=oncelog.NO_RESULT, correct=True)
    approval: oncelog.Approval = ledger.approve("r", "s", by="bob", expires_in=60.0)
    assert approval.status is oncelog.ApprovalStatus.APPROVED
    halt: oncelog.Halt = ledger.halt("runaway", by="carol", agent="support")
    assert halt.scope is oncelog.HaltScope.AGENT
    ledger.clear_halt(by="carol", agent="support", note="fixed")
    ledger.halt("not started yet", by="carol", run="r-next", ahead=True)
    retried: oncelog.StepRecord = ledger.retry("r", "s", by="alice", why="the provider is back")
    assert retried.state is oncelog.StepState.NOT_DONE
    refusals: tuple[type[oncelog.OnceLogError], ...] = (oncelog.NotRetryable, oncelog.UnknownAgent)
    assert all(issubclass(r, oncelog.OnceLogError) for r in refusals)
    ledger.set_budget("r", oncelog.Budget(tokens=1000), by="dave")
    ledger.set_agent_budget("support", oncelog.AgentBudget(cost=10.0), by="dave")


def reading(ledger: oncelog.Ledger) -> list[str]:
    runs: list[oncelog.RunRecord] = ledger.runs(oncelog.RunStatus.HALTED, limit=10)
    entries: list[oncelog.JournalEntry] = ledger.journal(runs[0].run_id)
    key: str = oncelog.idempotency_key("r", "s", "send_email")
    return [key, *(entry.event for entry in entries), *ledger.what_next("r")]


def errors(ledger: oncelog.Ledger) -> int:
    try:
        a_run(ledger)
    except oncelog.RunHalted as halted:
        return oncelog.exit_code_for(halted)
    except oncelog.AmbiguousOutcome as unknown:
        print(unknown.run_id, unknown.step_id)
        return oncelog.EXIT_HALTED
    except oncelog.RunPruned as pruned:
        archive: str | None = pruned.archive
        print(archive, pruned.status, pruned.pruned_at)
        forgotten: oncelog.RunPruned = ledger.forget_pruned("r", by="dave")
        print(forgotten.anchor)
        return oncelog.EXIT_PRUNED
    except oncelog.OnceLogError:
        return 1
    return oncelog.EXIT_COMPLETED


def a_worker_process() -> None:
    oncelog.run_main(lambda: a_run(oncelog.open(durability="full", lease_ttl=10.0)))


def a_test() -> None:
    clock = testing.FakeClock()
    provider = testing.FakeProvider(clock=clock)
    with testing.temporary_ledger() as ledger:
        testing.use_clock(ledger, clock)
        tool = provider.tool(kind="create")
        with ledger.run("test") as run:
            run.effect("one", tool, {"to": "ada"})
            testing.abandon(run)
        performed: list[testing.Performed] = provider.performed
        assert len(performed) == 1
        asyncio.run(an_async_run(ledger))


ANY_RESULT: Any = oncelog.NO_RESULT


@oncelog.tool(kind="payment", provider=providers.adyen, dedupe_window=timedelta(days=1))
def capture(psp_reference: str, *, idempotency_key: str) -> dict[str, str]:
    return {"pspReference": psp_reference}


def stamped_notes(notes: list[dict[str, str]]) -> markers.MarkerProbe[dict[str, str]]:
    return markers.MarkerProbe(
        search=lambda marker: [note for note in notes if marker in note["body"]],
        marker_of=lambda note: markers.stamped(note["body"]),
        consistent_after=timedelta(seconds=5),
    )


@oncelog.tool(kind="create", probe=stamped_notes([]))
def add_note(body: str, *, idempotency_key: str) -> dict[str, str]:
    return {"body": markers.stamp(body, idempotency_key)}
