"""A probe declared in the gateway's config, as an upstream tool that finds a call's
effect by its key: after a gateway is SIGKILLed at any commit boundary, the call sent
again is settled by the probe (done with its answer, or sent once if it never went out),
never sent twice and never left for a person when the upstream can tell. A probe that
cannot tell, or cannot be reached, leaves the call for a person, as without one. A probe
meets the other declarations: a subject another run waits on, and an approval whose
requestState comes back after the kill. Counted at the upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oncelog.testing import CRASH_POINTS

from .support.gateway import (
    TOOLS,
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

EMAIL = {"to": "a@example.com", "body": "hi"}
PROBES = {"send_email": {"tool": "find_effect", "key_argument": "key"}}

upstream = upstream_fixture()


def killed_in_a_call(
    config: Path, url: str, point: str, tool: str, arguments: dict[str, Any], run: str,
    call_id: str, **options: Any,
) -> None:  # fmt: skip
    """Call ``tool`` through a gateway SIGKILLed at ``point`` of that call."""
    doomed = start_gateway(config, url, crash_at=f"{point}@{tool}/{call_id}")
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the stream breaks, as it may
            sync_call(doomed.url, tool, arguments, run, call_id, **options)
        assert doomed.process.wait(timeout=30) == -9
    finally:
        doomed.kill()


def killed_then_again(
    tmp_path: Path, upstream: Upstream, point: str, probes: dict[str, Any]
) -> tuple[Any, Any]:
    """send_email (create, no window) through a gateway SIGKILLed at ``point``, then sent
    again, twice, to a new gateway: its two answers."""
    config = gateway_config(tmp_path, upstream, probes=probes)
    url = str(tmp_path / "l.db")
    killed_in_a_call(config, url, point, "send_email", EMAIL, "ticket-1", "m-1")
    with running_gateway(config, url) as gw:
        again = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
        twice = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
    return again, twice


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_probe_settles_a_call_killed_at_each_commit_boundary(
    tmp_path: Path, upstream: Upstream, point: str
) -> None:
    again, twice = killed_then_again(tmp_path, upstream, point, PROBES)
    assert not again.is_error, text_of(again)
    assert text_of(twice) == text_of(again)
    assert upstream.performed("send_email") == 1
    sent = upstream.received("send_email")
    assert len(sent) == 1
    probed = upstream.received("find_effect")
    if point in ("after_intent_commit", "after_call", "before_outcome_commit"):
        # In doubt: asked once, by its key; the answer is the probe's when it went out.
        assert [e["arguments"] for e in probed] == [{"key": sent[0]["key"]}]
        if point != "after_intent_commit":
            assert '"found": true' in text_of(again)
    else:
        assert probed == []  # nothing in doubt: nobody asked


def test_a_probe_that_cannot_tell_leaves_the_call_for_a_person(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The probe tool answers an error (it is asked without the key it needs): oncelog
    cannot tell, so the call waits for a person, as without a probe, and is not sent."""
    wrong = {"send_email": {"tool": "find_effect", "key_argument": "id"}}
    again, _ = killed_then_again(tmp_path, upstream, "after_call", wrong)
    assert again.is_error
    assert "AmbiguousOutcome" in text_of(again)
    assert len(upstream.received("find_effect")) >= 1
    assert upstream.performed("send_email") == 1


def test_a_probe_that_cannot_be_reached_leaves_the_call_for_a_person_who_settles_it(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The upstream that answers the probe is gone when the call comes again: nobody can
    tell, so the call waits for a person (the gateway stays up and says how) and nothing is
    sent; the person's ``resolve ... done`` is what the call then answers."""
    config = gateway_config(tmp_path, upstream, probes=PROBES)
    url = str(tmp_path / "l.db")
    killed_in_a_call(config, url, "after_call", "send_email", EMAIL, "ticket-1", "m-1")
    with running_gateway(config, url) as gw:
        upstream.kill()
        again = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
        assert again.is_error
        assert "AmbiguousOutcome" in text_of(again)
        assert "oncelog resolve ticket-1 send_email/m-1" in text_of(again)
        oncelog_cli(url, "resolve", "ticket-1", "send_email/m-1", "done", "--no-result",
                    "--by", "ana")  # fmt: skip
        settled = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
        assert not settled.is_error, text_of(settled)
    assert "probe find_effect could not be asked" in (tmp_path / "gateway.log").read_text()
    assert upstream.performed("send_email") == 1
    assert upstream.received("find_effect") == []  # asked, never answered


def test_a_probe_settles_the_subject_another_run_waits_on(
    tmp_path: Path, upstream: Upstream
) -> None:
    """Order 42 is refunded once per hour (``once_per``, ``once_for``); the gateway is
    SIGKILLed after the upstream refunded it for ticket-1. Another run's refund of that
    order is refused while the first is in doubt (nothing sent); ticket-1's call again is
    settled by the probe; the other run then gets the first's receipt. One refund."""
    tools = {**TOOLS, "refund": {"kind": "payment", "once_per": ["order_id"], "once_for": 3600}}
    probes = {"refund": {"tool": "find_effect", "key_argument": "key"}}
    config = gateway_config(tmp_path, upstream, tools=tools, probes=probes)
    url, refund = str(tmp_path / "l.db"), {"order_id": 42, "amount": 5}
    killed_in_a_call(config, url, "after_call", "refund", refund, "ticket-1", "r-1")
    with running_gateway(config, url) as gw:
        other = sync_call(gw.url, "refund", refund, "ticket-2", "r-1")
        assert other.is_error
        assert "Subject" in text_of(other), text_of(other)
        assert upstream.received("refund") == [upstream.received("refund")[0]]
        settled = sync_call(gw.url, "refund", refund, "ticket-1", "r-1")
        assert not settled.is_error, text_of(settled)
        assert '"found": true' in text_of(settled)
        receipt = sync_call(gw.url, "refund", refund, "ticket-2", "r-1")
        assert not receipt.is_error, text_of(receipt)
        assert receipt.content == settled.content
    assert upstream.performed("refund") == 1
    assert len(upstream.received("refund")) == 1
    assert len(upstream.received("find_effect")) == 1


def test_an_approved_call_killed_after_the_upstream_acted_is_settled_by_its_probe(
    tmp_path: Path, upstream: Upstream
) -> None:
    """A destructive call approved by a person, its gateway SIGKILLed after the upstream
    deleted: the client's retry with the same requestState (it never had an answer) is
    settled by the probe, not asked of the person again nor sent again; the state then
    presented once more is refused."""
    from mcp import MCPError

    probes = {"delete_account": {"tool": "find_effect", "key_argument": "key"}}
    config = gateway_config(tmp_path, upstream, probes=probes)
    url, customer = str(tmp_path / "l.db"), {"customer": "cus_1"}
    with running_gateway(config, url) as gw:
        _, state = waiting(sync_call(gw.url, "delete_account", customer, "ticket-1", "d-1"))
    oncelog_cli(url, "approve", "ticket-1", "delete_account/d-1", "--by", "ana")
    killed_in_a_call(config, url, "after_call", "delete_account", customer, "ticket-1", "d-1",
                     request_state=state)  # fmt: skip
    with running_gateway(config, url) as gw:
        settled = sync_call(gw.url, "delete_account", customer, "ticket-1", "d-1",
                            request_state=state)  # fmt: skip
        assert not settled.is_error, text_of(settled)
        assert '"found": true' in text_of(settled)
        with pytest.raises(MCPError, match="requestState already used"):
            sync_call(gw.url, "delete_account", customer, "ticket-1", "d-1", request_state=state)
    assert upstream.performed("delete_account") == 1
    assert len(upstream.received("find_effect")) == 1


@pytest.mark.parametrize(
    ("probes", "said"),
    [
        ({"send_email": {"tool": "no_such_tool"}}, "must be listed by an upstream"),
        ({"no_such_tool": {"tool": "find_effect"}}, "must be listed by an upstream"),
        ({"send_email": {"tool": ""}}, "the probe of 'send_email' is"),
        ({"send_email": {"tool": "find_effect", "timeout": 3}}, "the probe of 'send_email' is"),
    ],
)
def test_a_probe_the_gateway_cannot_use_stops_it_at_its_start(
    tmp_path: Path, upstream: Upstream, probes: dict[str, Any], said: str
) -> None:
    config = gateway_config(tmp_path, upstream, probes=probes)
    with pytest.raises(AssertionError, match="did not start") as failed:
        start_gateway(config, str(tmp_path / "l.db"))
    assert said in str(failed.value)
    assert upstream.received() == []
