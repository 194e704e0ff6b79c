"""``oncelog gateway`` meeting the other declarations its config expresses (issue 44): a
subject once per period (``once_for``), one subject however a client spells its number, a
dedupe window across runs after a SIGKILL, a kill switch turned on while a call waits for
its run's lease, budgets, and a person's edit of the arguments on approval. Each through a
real gateway process, counted at the upstream process. Probes meet subjects and approvals
in test_gateway_probes.py; retries are not in the gateway's (nor the proxy's) JSON
config: see docs/gateway.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

import oncelog

from .support.gateway import (
    Upstream,
    gateway_config,
    running_gateway,
    start_gateway,
    sync_call,
    text_of,
    upstream_fixture,
)
from .support.operator_commands import oncelog_cli
from .test_gateway_approvals import waiting
from .test_gateway_replicas import HANG, Background, paused_gateway

LINK_SECRET = "gateway-test-link-secret-0123456789"  # as start_gateway gives it
REFUND = {"order_id": 42, "amount": 5}
EMAIL = {"to": "a@example.com", "body": "hi"}
SUBJECTS: dict[str, Any] = {
    "refund": {"kind": "payment", "once_per": ["order_id"], "once_for": 3600},
    # Claimed for a millisecond: the next call, a round trip later, is in the next period.
    "send_email": {"kind": "create", "once_per": ["to"], "once_for": 0.001},
    "delete_account": "destructive",
}


upstream = upstream_fixture()


keyed_upstream = upstream_fixture(dedupe=True, name="keyed")


def test_a_subject_is_performed_once_within_its_period_and_again_after_it(
    tmp_path: Path, upstream: Upstream
) -> None:
    config = gateway_config(tmp_path, upstream, tools=SUBJECTS)
    with running_gateway(config, str(tmp_path / "l.db")) as gw:
        first = sync_call(gw.url, "refund", REFUND, "ticket-1", "c-1")
        # Another run, the same order within the hour: the first refund's receipt.
        again = sync_call(gw.url, "refund", REFUND, "ticket-2", "c-9")
        assert [first.is_error, again.is_error] == [False, False], text_of(again)
        assert again.content == first.content
        assert upstream.performed("refund") == 1
        for run in ("ticket-1", "ticket-2"):
            sent = sync_call(gw.url, "send_email", EMAIL, run, "m-1")
            assert not sent.is_error, text_of(sent)
    # Each period its own performance, under its own key.
    emails = upstream.received("send_email")
    assert upstream.performed("send_email") == len(emails) == 2
    assert emails[0]["key"] != emails[1]["key"]


def test_42_and_42_0_are_one_subject_across_runs_and_the_string_42_is_refused(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The input schema declares order_id an integer: 42.0 in another run is the order
    42 refunded, its receipt given back (it stopped that run on ArgumentDrift when the
    arguments were recorded as sent); "42" is refused, sending nothing, and its run goes
    on."""
    config = gateway_config(tmp_path, upstream, tools=SUBJECTS)
    with running_gateway(config, str(tmp_path / "l.db")) as gw:
        first = sync_call(gw.url, "refund", REFUND, "ticket-1", "c-1")
        spelt = sync_call(gw.url, "refund", {"order_id": 42.0, "amount": 5.0}, "ticket-2", "c-1")
        assert not spelt.is_error, text_of(spelt)
        assert spelt.content == first.content
        later = sync_call(gw.url, "send_email", EMAIL, "ticket-2", "m-1")  # its run goes on
        assert not later.is_error, text_of(later)
        string = sync_call(gw.url, "refund", {"order_id": "42", "amount": 5}, "ticket-3", "c-1")
        assert string.is_error
        assert "argument 'order_id' is '42', not integer" in text_of(string)
        other = sync_call(gw.url, "refund", {"order_id": 43, "amount": 5}, "ticket-3", "c-2")
        assert not other.is_error, text_of(other)
    assert [e["arguments"]["order_id"] for e in upstream.received("refund")] == [42, 43]
    assert upstream.performed("refund") == 2


@pytest.mark.parametrize("point", ["after_intent_commit", "after_call"])
def test_a_subject_in_doubt_after_a_kill_is_performed_once_by_its_key_across_runs(
    tmp_path: Path, keyed_upstream: Upstream, point: str
) -> None:
    """refund's dedupe_window, met by a client that sends the call again under another
    run: that run is told which run holds the order; the holder's call sent again
    resends the key (the upstream performs it once), and the other run then gets its
    receipt."""
    refund = {"kind": "payment", "once_per": ["order_id"], "dedupe_window": 86400}
    config = gateway_config(tmp_path, keyed_upstream, tools={"refund": refund})
    url = str(tmp_path / "l.db")
    doomed = start_gateway(config, url, crash_at=f"{point}@refund/c-1")
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the stream breaks, as it may
            sync_call(doomed.url, "refund", REFUND, "ticket-1", "c-1")
    finally:
        doomed.kill()
    with running_gateway(config, url) as gw:
        elsewhere = sync_call(gw.url, "refund", REFUND, "ticket-2", "c-1")
        assert elsewhere.is_error
        assert "run ticket-1, step refund/c-1" in text_of(elsewhere), text_of(elsewhere)
        holder = sync_call(gw.url, "refund", REFUND, "ticket-1", "c-1")
        assert not holder.is_error, text_of(holder)
        taken = sync_call(gw.url, "refund", REFUND, "ticket-2", "c-1")
        assert taken.content == holder.content
    assert len({e["key"] for e in keyed_upstream.received("refund")}) == 1
    assert keyed_upstream.performed("refund") == 1


def test_a_halt_while_a_call_waits_for_its_runs_lease_stops_it_before_the_upstream(
    tmp_path: Path, upstream: Upstream
) -> None:
    """One replica holds the run mid-call; the other replica's call of the run waits for
    the lease; a person halts the run. The call in flight records its outcome, the waiting
    one is refused naming the way out, and runs once the person resumes the run."""
    config, url = gateway_config(tmp_path, upstream), str(tmp_path / "l.db")
    other = {"to": "b@example.com"}
    first, pause = paused_gateway(config, url, "after_call@send_email/m-1")
    try:
        with running_gateway(config, url) as second:
            holding = Background(first.url, "send_email", EMAIL, "ticket-1", "m-1")
            pause.wait(HANG)
            waiter = Background(second.url, "send_email", other, "ticket-1", "m-2")
            oncelog_cli(url, "halt", "--run", "ticket-1", "--reason", "loop", "--by", "ops")
            pause.release()
            held, refused = holding.result(), waiter.result()
            assert not held.is_error, text_of(held)
            assert refused.is_error
            assert "oncelog resume --run ticket-1" in text_of(refused), text_of(refused)
            assert [e["arguments"] for e in upstream.received()] == [EMAIL]
            replayed = sync_call(second.url, "send_email", EMAIL, "ticket-1", "m-1")
            assert replayed.content == held.content  # a recorded call, under the halt
            oncelog_cli(url, "resume", "--run", "ticket-1", "--by", "ana")
            done = sync_call(second.url, "send_email", other, "ticket-1", "m-2")
            assert not done.is_error, text_of(done)
    finally:
        pause.close()
        first.kill()
    assert [e["arguments"] for e in upstream.received()] == [EMAIL, other]
    assert upstream.performed() == 2


def test_budgets_refuse_calls_past_them_and_replays_go_on(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The config's agent has a daily budget a person set, and a run a budget of its own:
    a call past either is refused naming how a person raises it, sending nothing; a
    recorded call is still answered; raised, the refused call runs once."""
    config, url = gateway_config(tmp_path, upstream, agent="billing"), str(tmp_path / "l.db")
    with oncelog.open(url) as ledger:
        ledger.set_agent_budget("billing", oncelog.AgentBudget(calls=1), by="ops")
    with running_gateway(config, url) as gw:
        first = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
        over = sync_call(gw.url, "send_email", EMAIL, "ticket-2", "m-1")
        assert over.is_error
        assert "set_agent_budget('billing'" in text_of(over), text_of(over)
        assert sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1").content == first.content
        assert upstream.performed() == 1
        with oncelog.open(url) as ledger:
            ledger.set_agent_budget("billing", oncelog.AgentBudget(calls=10), by="ops")
        assert not sync_call(gw.url, "send_email", EMAIL, "ticket-2", "m-1").is_error
        oncelog_cli(url, "budgets", "ticket-1", "--set", "steps=1", "--by", "ops")
        past = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-2")
        assert past.is_error
        assert "oncelog budgets ticket-1 --set steps=" in text_of(past), text_of(past)
        oncelog_cli(url, "budgets", "ticket-1", "--set", "steps=2", "--by", "ops")
        assert not sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-2").is_error
        assert not sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-2").is_error
    assert upstream.performed() == 3
    assert len(upstream.received()) == 3


def test_an_approval_with_edited_arguments_performs_the_edited_call_once(
    tmp_path: Path, upstream: Upstream
) -> None:
    """A person approves delete_account for another customer (``approve --args``, as the
    console's link may): the call sent again with its requestState performs the edited
    call, once; the run's later calls go on (they stopped on ArgumentDrift when the
    gateway walked the edited step with its arguments by name as one positional)."""
    config, url = gateway_config(tmp_path, upstream), str(tmp_path / "l.db")
    asked = {"customer": "cus_1"}
    with running_gateway(config, url) as gw:
        _, state = waiting(sync_call(gw.url, "delete_account", asked, "ticket-1", "d-1"))
        # What the person copies and edits: the call's arguments under "arguments".
        assert '{"arguments": {"customer": "cus_1"}}' in oncelog_cli(url, "approvals")
        edited = '{"arguments": {"customer": "cus_2"}}'
        approved = oncelog_cli(url, "approve", "ticket-1", "delete_account/d-1", "--by", "ana",
                               "--args", edited)  # fmt: skip
        # The way on named for the person is the gateway's, not the stdio proxy's.
        assert "through the gateway (oncelog gateway) in run ticket-1" in approved, approved
        done = sync_call(gw.url, "delete_account", asked, "ticket-1", "d-1", request_state=state)
        assert not done.is_error, text_of(done)
        again = sync_call(gw.url, "delete_account", asked, "ticket-1", "d-1", request_state=state)
        assert again.content == done.content
        later = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
        assert not later.is_error, text_of(later)
        unnamed = sync_call(gw.url, "send_email", EMAIL, "ticket-1")
        assert not unnamed.is_error, text_of(unnamed)
    assert [e["arguments"] for e in upstream.received("delete_account")] == [{"customer": "cus_2"}]
    assert upstream.performed("delete_account") == 1
    assert upstream.performed("send_email") == 2


def test_an_edit_through_the_signed_link_performs_the_edited_call_once(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The console's link page decides as ``approve --args`` does: its edit binds the
    request the link names, and the call sent again with its requestState runs the
    edited call once."""
    config, url = gateway_config(tmp_path, upstream), str(tmp_path / "l.db")
    asked = {"customer": "cus_1"}
    with running_gateway(config, url) as gw:
        page, state = waiting(sync_call(gw.url, "delete_account", asked, "ticket-1", "d-1"))
        with pytest.MonkeyPatch.context() as env:
            env.setenv("ONCELOG_LINK_SECRET", LINK_SECRET)
            with oncelog.open(url) as ledger:
                link = ledger.check_link(unquote(page.rsplit("/link/", 1)[1]))
                ledger.approve(link.run_id, link.step_id, by="ana", request=link.number,
                               args_hash=link.args_hash, link=link.nonce,
                               args={"arguments": {"customer": "cus_2"}})  # fmt: skip
        for _ in range(2):
            done = sync_call(gw.url, "delete_account", asked, "ticket-1", "d-1",
                             request_state=state)  # fmt: skip
            assert not done.is_error, text_of(done)
        assert not sync_call(gw.url, "send_email", EMAIL, "ticket-1").is_error
    assert [e["arguments"] for e in upstream.received("delete_account")] == [{"customer": "cus_2"}]
    assert upstream.performed() == 2
