"""Approvals that fit real policies (issue 33, item 3): a per-call policy, a person's
edited arguments, an approval that expires. The refund agent (``approval_agents/
refunder.py``) runs as a process and pays through a provider process, which counts what
was performed; kills are SIGKILLs at named crash points."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import oncelog
from oncelog.records._serialization import digest

from .support import oncelog_cli
from .support.launch import environment, run_python
from .support.provider_process import Provider, running_provider
from .test_approval_binding import tamper

REFUNDER = Path(__file__).parent / "approval_agents" / "refunder.py"


def refund(
    ledger: str, provider: Provider, amount: int, *options: str, crash_at: str | None = None,
    order: str = "o-1", run: str = "r1",
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return run_python(
        REFUNDER, ledger, run, provider.url, order, str(amount), *options,
        env=environment(crash_at),
    )  # fmt: skip


def paid(provider: Provider, run: str = "r1") -> list[dict[str, object]]:
    """What the provider performed for ``run``: its payloads."""
    return [e.payload for e in provider.effects(run)]


def test_a_small_refund_needs_no_person_and_a_large_one_waits(
    store_url: str, tmp_path: Path
) -> None:
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        small = refund(store_url, provider, 50, run="small")
        assert small.returncode == 0, small.stderr
        large = refund(store_url, provider, 150, run="large")
        assert large.returncode == oncelog.EXIT_WAITING, large.stderr
        assert "ApprovalRequired" in large.stderr
        assert paid(provider, "small") == [{"order": "o-1", "amount": 50}]
        assert paid(provider, "large") == []
    with oncelog.open(store_url) as ledger:
        [asked] = ledger.approvals()
        assert asked.run_id == "large"


def test_a_policy_changed_after_asking_cannot_skip_the_approval(
    store_url: str, tmp_path: Path
) -> None:
    """The step asked a person; the next start's policy would say no: it still waits."""
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:

            @ledger.tool(kind="payment", name="refund", approval=lambda order, amount: False)
            def lenient(order: str, amount: int, *, idempotency_key: str) -> None:
                raise AssertionError("a changed policy ran the refund without its approval")

            with pytest.raises(oncelog.ApprovalRequired), ledger.run("r1") as run:
                run.effect("refund", lenient, "o-1", 150)
        assert paid(provider) == []


def test_a_failing_policy_is_a_typed_error_and_writes_nothing(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:

        @ledger.tool(kind="payment", name="refund", approval=lambda order, amount: amount > 100)
        def pay(order: str, amount: object, *, idempotency_key: str) -> None:
            raise AssertionError("called")

        with (
            pytest.raises(oncelog.ConfigurationError, match="approval function"),
            ledger.run("r1") as run,
        ):
            run.effect("refund", pay, "o-1", "150")  # a str: '>' raises
        assert ledger.steps("r1") == []
        assert ledger.approvals(None) == []
        assert ledger.verify().ok


def test_a_policy_reads_the_recorded_arguments_not_the_live_objects(store_url: str) -> None:
    """An int whose comparison lies is recorded as its number; the policy sees that."""

    class Small(int):
        def __gt__(self, other: object) -> bool:
            return False

    with oncelog.open(store_url) as ledger:

        @ledger.tool(kind="payment", name="refund", approval=lambda order, amount: amount > 100)
        def pay(order: str, amount: int, *, idempotency_key: str) -> None:
            raise AssertionError("a lying argument dodged the approval")

        with pytest.raises(oncelog.ApprovalRequired), ledger.run("r1") as run:
            run.effect("refund", pay, "o-1", Small(150))


def test_an_edited_approval_runs_the_edited_call_once_under_a_new_key(
    store_url: str, tmp_path: Path
) -> None:
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
        pending = oncelog_cli(store_url, "approvals")
        assert 'by name (to edit with approve --args): {"order": "o-1", "amount": 150}' in pending
        out = oncelog_cli(
            store_url, "approve", "r1", "refund", "--by", "alice", "--note", "policy cap",
            "--args", '{"order": "o-1", "amount": 100}', "--for", "1h",
        )  # fmt: skip
        assert "amount: 150 → 100" in out
        shown = oncelog_cli(store_url, "show", "r1")
        assert "approved edited arguments of refund by alice: policy cap" in shown
        assert "amount: 150 → 100" in shown
        listed = oncelog_cli(store_url, "approvals", "--all")
        assert "amount: 150 → 100" in listed
        done = refund(store_url, provider, 150)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["amount"] == 100  # the code sees the edited call's result
        again = refund(store_url, provider, 150)  # a replay performs nothing
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == json.loads(done.stdout)
        [performed] = provider.effects("r1")
    assert performed.payload == {"order": "o-1", "amount": 100}
    with oncelog.open(store_url) as ledger:
        asked_key = oncelog.idempotency_key("r1", "refund", "refund")
        assert performed.key != asked_key
        statuses = {a.status for a in ledger.approvals(None)}
        assert statuses == {oncelog.ApprovalStatus.EDITED, oncelog.ApprovalStatus.USED}
        [used] = [a for a in ledger.approvals(None) if a.status is oncelog.ApprovalStatus.USED]
        assert used.expires_at is not None
        assert used.decided_at is not None
        assert used.expires_at - used.decided_at == pytest.approx(3600, abs=2)
        [edit] = ledger.approval_edits("r1", "refund")
        assert (edit.by, edit.note) == ("alice", "policy cap")
        assert json.loads(edit.args_json) == {"order": "o-1", "amount": 150}
        assert json.loads(edit.edited_args_json) == {"order": "o-1", "amount": 100}
        assert ledger.verify().ok


@pytest.mark.parametrize(
    ("edited", "said"),
    [
        ("{not json", "not JSON"),
        ('{"order": "o-1", "amount": 1, "to": "me"}', "unknown parameter 'to'"),
        ('{"order": "o-1"}', "missing parameter 'amount'"),
        ('["o-1", 1]', "JSON object"),
        ('{"order": ' + "[" * 60_000 + "]" * 60_000 + "}", "nested more than 200 levels"),
        ('{"order": ' + "[" * 300 + "]" * 300 + ', "amount": 1}', "nested more than 200"),
    ],
)
def test_bad_edited_arguments_are_refused_and_leave_the_request_pending(
    store_url: str, tmp_path: Path, edited: str, said: str
) -> None:
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            with pytest.raises(oncelog.InvalidPayload, match=said):
                ledger.approve("r1", "refund", by="alice", args=edited)
            [pending] = ledger.approvals()
            assert pending.status is oncelog.ApprovalStatus.PENDING
            assert ledger.verify().ok


def test_a_kill_before_the_edited_calls_intent_commits_uses_the_approval_on_restart(
    store_url: str, tmp_path: Path
) -> None:
    """The intent's transaction (which uses the approval) never commits: the approval of
    the edited call is still there, and the restart performs the edited call once."""
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            ledger.approve("r1", "refund", by="alice", args={"order": "o-1", "amount": 90})
        killed = refund(store_url, provider, 150, crash_at="before_intent_commit")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        done = refund(store_url, provider, 150)
        assert done.returncode == 0, done.stderr
        assert paid(provider) == [{"order": "o-1", "amount": 90}]


def test_an_async_agent_waiting_in_place_gets_the_edited_call(store_url: str) -> None:
    async def agent(ledger: oncelog.Ledger) -> object:
        @ledger.tool(kind="payment", name="refund", approval=lambda order, amount: amount > 100)
        async def pay(order: str, amount: int, *, idempotency_key: str) -> int:
            return amount

        async with ledger.run("r1") as run:
            return await run.effect("refund", pay, "o-1", 150)

    def approve_when_asked() -> None:
        with oncelog.open(store_url) as person:
            while not person.approvals():
                time.sleep(0.05)
            person.approve("r1", "refund", by="alice", args='{"order": "o-1", "amount": 99}')

    with oncelog.open(store_url, approval_poll=0.05) as ledger:
        helper = threading.Thread(target=approve_when_asked)
        helper.start()
        got = asyncio.run(agent(ledger))
        helper.join()
    assert got == 99


def test_a_bad_edit_from_the_shell_exits_2_and_says_why(store_url: str, tmp_path: Path) -> None:
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
    told = run_python(
        "-m", "oncelog", "approve", "r1", "refund", "--by", "alice", "--args", '{"amount": 1}',
        "--db", store_url,
    )  # fmt: skip
    assert told.returncode == 2, told.stderr
    assert "missing parameter 'order'" in told.stderr


def test_edited_arguments_nested_too_deeply_from_the_shell_exit_2_without_a_traceback(
    store_url: str, tmp_path: Path
) -> None:
    """Python's JSON decoder recurses per level: text 60,000 levels deep raised a
    RecursionError, and the shell saw a traceback instead of a usage error."""
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
        deep = '{"order": ' + "[" * 60_000 + "]" * 60_000 + ', "amount": 1}'
        told = run_python(
            "-m", "oncelog", "approve", "r1", "refund", "--by", "alice", "--args", deep,
            "--db", store_url,
        )  # fmt: skip
        assert told.returncode == 2, told.stderr[-2000:]
        assert "nested more than 200 levels deep" in told.stderr
        assert "Traceback" not in told.stderr
        with oncelog.open(store_url) as ledger:
            [pending] = ledger.approvals()
        assert pending.status is oncelog.ApprovalStatus.PENDING
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
        assert paid(provider) == []


@pytest.mark.parametrize("point", ["after_intent_commit", "after_call"])
def test_a_kill_around_the_edited_call_performs_it_once(
    store_url: str, tmp_path: Path, point: str
) -> None:
    """SIGKILL after the edited call's intent (before the call) or after the call (before
    its outcome): the next attempt asks again (each attempt needs a person), for the edited
    call, not the one first asked; approved, it is sent with the edited call's key, which
    the provider deduplicates: it performed one refund, the edited one."""
    with running_provider(tmp_path / "p", "honours_keys") as provider:
        options = ("--dedupe-window", "3600")
        assert refund(store_url, provider, 150, *options).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            ledger.approve("r1", "refund", by="alice", args={"order": "o-1", "amount": 90})
        killed = refund(store_url, provider, 150, *options, crash_at=point)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        again = refund(store_url, provider, 150, *options)
        assert again.returncode == oncelog.EXIT_WAITING, again.stderr
        with oncelog.open(store_url) as ledger:
            [asked] = ledger.approvals()
            edited = {"args": [], "kwargs": {"order": "o-1", "amount": 90}}
            assert json.loads(asked.args_json) == edited
            ledger.approve("r1", "refund", by="alice", request=asked.id)
        done = refund(store_url, provider, 150, *options)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["amount"] == 90
        assert paid(provider) == [{"order": "o-1", "amount": 90}]
        requests = provider.requests("r1")
        assert len({r.key for r in requests}) == 1


def test_an_edit_that_moves_the_subject_cannot_do_another_orders_refund_twice(
    store_url: str, tmp_path: Path
) -> None:
    """Order o-2 was refunded by another run; a person edits r1's refund of o-1 into o-2:
    the edited call's subject is o-2's, claimed by that run with other recorded arguments,
    so the step stops on the drift (a payment's default) and sends nothing."""
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        first = refund(store_url, provider, 50, "--subject", order="o-2", run="other")
        assert first.returncode == 0, first.stderr
        assert refund(store_url, provider, 150, "--subject").returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            ledger.approve("r1", "refund", by="mallory", args={"order": "o-2", "amount": 60})
        stopped = refund(store_url, provider, 150, "--subject")
        assert stopped.returncode == oncelog.EXIT_HALTED, stopped.stderr
        assert "ArgumentDrift" in stopped.stderr
        assert "'other'" in stopped.stderr
        assert paid(provider, "r1") == []
        assert len(paid(provider, "other")) == 1


def test_an_edit_onto_a_subject_done_with_the_same_call_by_position_takes_its_result(
    store_url: str, tmp_path: Path
) -> None:
    """Another run refunded o-2 with ``refund("o-2", 50)`` (by position); a person edits
    r1's refund into ``{"order": "o-2", "amount": 50}`` (by name): the same call, so r1
    takes that refund's result, sends nothing, and needs no one (it halted on
    ArgumentDrift when the recorded texts were compared instead of the calls)."""
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        first = refund(store_url, provider, 50, "--subject", order="o-2", run="other")
        assert first.returncode == 0, first.stderr
        assert refund(store_url, provider, 150, "--subject").returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            ledger.approve("r1", "refund", by="alice", args={"order": "o-2", "amount": 50})
        done = refund(store_url, provider, 150, "--subject")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == json.loads(first.stdout)
        assert paid(provider, "r1") == []
        assert paid(provider, "other") == [{"order": "o-2", "amount": 50}]


def test_an_approval_unused_past_the_tools_bound_asks_again(store_url: str, tmp_path: Path) -> None:
    """``approval_expires``: judged by the store's clock; the fresh request names the old."""
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        options = ("--approval-expires", "1")
        assert refund(store_url, provider, 150, *options).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            first = ledger.approve("r1", "refund", by="alice")
        time.sleep(1.5)
        late = refund(store_url, provider, 150, *options)
        assert late.returncode == oncelog.EXIT_WAITING, late.stderr
        assert paid(provider) == []
        with oncelog.open(store_url) as ledger:
            [fresh] = ledger.approvals()
            assert fresh.id != first.id
            [old] = [a for a in ledger.approvals(None) if a.id == first.id]
            assert old.status is oncelog.ApprovalStatus.EXPIRED
            [asked] = [
                e for e in ledger.journal("r1")
                if e.event == "approval_requested" and e.data["request"] == fresh.id
            ]  # fmt: skip
            assert asked.data["expired"] == [first.id]
            ledger.approve("r1", "refund", by="alice")
        # The bound is the tool's at the time of use: a minute, so that a loaded machine's
        # process start (more than the second above, at times) does not expire this one too.
        done = refund(store_url, provider, 150, "--approval-expires", "60")
        assert done.returncode == 0, done.stderr
        assert len(paid(provider)) == 1


def test_an_expired_approval_cannot_be_approved_again(store_url: str, tmp_path: Path) -> None:
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        options = ("--approval-expires", "1")
        assert refund(store_url, provider, 150, *options).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            first = ledger.approve("r1", "refund", by="alice")
        time.sleep(1.5)
        assert refund(store_url, provider, 150, *options).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            for edited in (None, {"order": "o-1", "amount": 100}):
                with pytest.raises(
                    oncelog.UnknownApproval, match=r"expired \(decided by alice .*\), not pending"
                ):
                    ledger.approve("r1", "refund", by="mallory", request=first.id, args=edited)
            assert ledger.verify().ok
        assert paid(provider) == []


def test_a_secret_field_cannot_be_edited_and_keeps_its_value(store_url: str) -> None:
    """The ledger holds a secret field's keyed hash only: an edit must give it as shown,
    and the edited call gets the value the code passed."""
    sent: list[tuple[str, int]] = []
    with oncelog.open(store_url, redaction_key="k" * 32) as ledger:

        @ledger.tool(kind="payment", name="charge", approval=True, secret=("card",))
        def charge(card: str, amount: int, *, idempotency_key: str) -> int:
            sent.append((card, amount))
            return amount

        def agent() -> int:
            with ledger.run("r1") as run:
                return int(run.effect("charge", charge, "4242", 150))

        with pytest.raises(oncelog.ApprovalRequired):
            agent()
        [asked] = ledger.approvals()
        shown = ledger.editable_arguments(asked)
        assert shown is not None
        assert str(shown["card"]).startswith("redacted:")
        with pytest.raises(oncelog.InvalidPayload, match="secret field"):
            ledger.approve("r1", "charge", by="alice", args={**shown, "card": "5555"})
        ledger.approve("r1", "charge", by="alice", args={**shown, "amount": 90})
        assert agent() == 90
        assert agent() == 90  # replayed
    assert sent == [("4242", 90)]


def test_an_edited_request_rewritten_behind_the_ledger_runs_nothing_and_verify_says_so(
    store_url: str, tmp_path: Path
) -> None:
    """Someone with write access moves the approved edit to another amount (its hash
    recomputed): the agent follows the journal's edit, finds no approval of it, and asks
    again; nothing is paid; verify reports the row."""
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
        with oncelog.open(store_url) as ledger:
            edited = ledger.approve("r1", "refund", by="alice", args={"order": "o-1", "amount": 90})
        forged = '{"args":[],"kwargs":{"amount":5000,"order":"o-1"}}'
        tamper(
            store_url, "UPDATE approvals SET args = ?, args_hash = ? WHERE id = ?",
            (forged, digest(forged), edited.id),
        )  # fmt: skip
        again = refund(store_url, provider, 150)
        assert again.returncode == oncelog.EXIT_WAITING, again.stderr
        assert paid(provider) == []
    with oncelog.open(store_url) as ledger:
        assert not ledger.verify().ok


def test_a_request_marked_edited_by_hand_is_reported(store_url: str, tmp_path: Path) -> None:
    with running_provider(tmp_path / "p", "ignores_keys") as provider:
        assert refund(store_url, provider, 150).returncode == oncelog.EXIT_WAITING
    tamper(store_url, "UPDATE approvals SET status = 'edited', decided_by = 'mallory'")
    with oncelog.open(store_url) as ledger:
        assert not ledger.verify().ok
