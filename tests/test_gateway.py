"""``oncelog gateway`` for real: the ``mcp`` package's client calls through a gateway
process to an upstream MCP server of the test's own, in a process of its own, that counts
what it performs. A call sent again under a new request id (a new client, a new
connection) is the same step: answered from the ledger, never performed again; the key
reaches the upstream; the gateway SIGKILLed at every commit boundary and started again
performs each call once at the upstream."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import oncelog
from oncelog.testing import CRASH_POINTS

from .support.gateway import (
    Upstream,
    gateway_config,
    list_tools,
    running_gateway,
    start_gateway,
    sync_call,
    text_of,
    upstream_fixture,
)
from .support.operator_commands import oncelog_cli

REFUND = {"order_id": 7, "amount": 500}


upstream = upstream_fixture()


keyed_upstream = upstream_fixture(dedupe=True, name="keyed")


def test_a_call_sent_again_under_a_new_request_id_is_answered_from_the_ledger(
    tmp_path: Path, upstream: Upstream
) -> None:
    with running_gateway(gateway_config(tmp_path, upstream), str(tmp_path / "l.db")) as gw:
        first = sync_call(gw.url, "refund", REFUND, "ticket-1", "call-1")
        again = sync_call(gw.url, "refund", REFUND, "ticket-1", "call-1")
        assert not first.is_error
        assert text_of(first) == text_of(again)
        assert upstream.performed("refund") == 1
        # The key reached the upstream in _meta, the same the ledger holds for the step.
        (received,) = upstream.received("refund")
        with oncelog.open(str(tmp_path / "l.db")) as ledger:
            (step,) = ledger.steps("ticket-1")
        assert (step.step_id, received["key"]) == ("refund/call-1", step.key)


def test_a_header_names_the_run_and_the_call(tmp_path: Path, upstream: Upstream) -> None:
    headers = {"Oncelog-Run-Id": "ticket-2", "Oncelog-Call-Id": "mail-1"}
    args = {"to": "a@example.com", "body": "hi"}
    with running_gateway(gateway_config(tmp_path, upstream), str(tmp_path / "l.db")) as gw:
        for _ in range(2):
            assert not sync_call(gw.url, "send_email", args, headers=headers).is_error
    assert upstream.performed("send_email") == 1
    with oncelog.open(str(tmp_path / "l.db")) as ledger:
        assert [s.step_id for s in ledger.steps("ticket-2")] == ["send_email/mail-1"]


def test_unnamed_identical_calls_are_one_step_and_named_ones_two(
    tmp_path: Path, upstream: Upstream
) -> None:
    args = {"to": "a@example.com", "body": "hi"}
    with running_gateway(gateway_config(tmp_path, upstream), str(tmp_path / "l.db")) as gw:
        sync_call(gw.url, "send_email", args, "ticket-3")
        sync_call(gw.url, "send_email", dict(reversed(args.items())), "ticket-3")  # key order
        assert upstream.performed("send_email") == 1
        sync_call(gw.url, "send_email", args, "ticket-3", "first")
        sync_call(gw.url, "send_email", args, "ticket-3", "second")
        assert upstream.performed("send_email") == 3
        # 7.0 for an integer the input schema declares is 7: the same unnamed step.
        sync_call(gw.url, "refund", {"order_id": 7, "amount": 5}, "ticket-4")
        sync_call(gw.url, "refund", {"order_id": 7.0, "amount": 5}, "ticket-4")
        assert upstream.performed("refund") == 1


def test_the_same_call_id_with_other_arguments_is_refused(
    tmp_path: Path, upstream: Upstream
) -> None:
    with running_gateway(gateway_config(tmp_path, upstream), str(tmp_path / "l.db")) as gw:
        sync_call(gw.url, "refund", REFUND, "ticket-5", "c")
        drifted = sync_call(gw.url, "refund", {"order_id": 7, "amount": 900}, "ticket-5", "c")
    assert drifted.is_error
    assert "ArgumentDrift" in text_of(drifted)
    assert upstream.performed("refund") == 1


def test_tools_without_a_kind_are_not_offered(tmp_path: Path, upstream: Upstream) -> None:
    config = gateway_config(tmp_path, upstream, tools={"lookup": "read"})
    with running_gateway(config, str(tmp_path / "l.db")) as gw:
        assert anyio.run(list_tools, gw.url) == ["lookup"]
        with pytest.raises(Exception, match="Unknown tool"):
            sync_call(gw.url, "refund", REFUND, "ticket-6", "c")
    assert upstream.performed() == 0


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_killed_at_each_commit_boundary_a_keyed_call_is_performed_once(
    tmp_path: Path, keyed_upstream: Upstream, point: str
) -> None:
    """refund declares a dedupe_window its upstream honours: sent again after any kill,
    with the same key, it is performed once and the client gets its receipt."""
    config, url = gateway_config(tmp_path, keyed_upstream), str(tmp_path / "l.db")
    doomed = start_gateway(config, url, crash_at=f"{point}@refund/c-9")
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the stream breaks, as it may
            sync_call(doomed.url, "refund", REFUND, "ticket-9", "c-9")
        assert doomed.process.wait(timeout=30) == -9
    finally:
        doomed.kill()
    with running_gateway(config, url) as gw:
        again = sync_call(gw.url, "refund", REFUND, "ticket-9", "c-9")
        assert not again.is_error, text_of(again)
        assert sync_call(gw.url, "refund", REFUND, "ticket-9", "c-9").content == again.content
    assert keyed_upstream.performed("refund") == 1


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_killed_at_each_commit_boundary_an_unkeyed_call_is_never_sent_twice(
    tmp_path: Path, upstream: Upstream, point: str
) -> None:
    """send_email (create, no window): after a kill between intent and outcome its
    outcome is unknown, and it waits for a person instead of being sent again."""
    config, url = gateway_config(tmp_path, upstream), str(tmp_path / "l.db")
    args = {"to": "a@example.com", "body": "hi"}
    doomed = start_gateway(config, url, crash_at=f"{point}@send_email/m-1")
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011
            sync_call(doomed.url, "send_email", args, "ticket-10", "m-1")
    finally:
        doomed.kill()
    with running_gateway(config, url) as gw:
        again = sync_call(gw.url, "send_email", args, "ticket-10", "m-1")
        twice = sync_call(gw.url, "send_email", args, "ticket-10", "m-1")
    sent = upstream.received("send_email")
    assert len(sent) <= 1
    assert upstream.performed("send_email") == len(sent)
    if point in ("after_intent_commit", "after_call", "before_outcome_commit"):
        assert again.is_error
        assert "AmbiguousOutcome" in text_of(again), text_of(again)
        assert "oncelog resolve ticket-10" in text_of(twice)
        # A person who saw the email arrive says so; the call moves on, sending nothing.
        oncelog_cli(url, "resolve", "ticket-10", "send_email/m-1", "done", "--no-result",
                    "--by", "ana")  # fmt: skip
        with running_gateway(config, url) as gw:
            settled = sync_call(gw.url, "send_email", args, "ticket-10", "m-1")
        assert not settled.is_error, text_of(settled)
        assert "done" in text_of(settled)
        assert upstream.received("send_email") == sent
    else:
        assert not again.is_error
        assert upstream.performed("send_email") == 1


def stdio_upstream(count_file: Path) -> dict[str, Any]:
    return {"command": [sys.executable, "-m", "tests.support.mcp_counting_upstream", "--stdio",
                        "--count-file", str(count_file)]}  # fmt: skip


def test_a_stdio_upstream_is_guarded_as_an_http_one(tmp_path: Path, upstream: Upstream) -> None:
    counted = tmp_path / "stdio-count.jsonl"
    config = gateway_config(tmp_path, upstream, upstreams={"local": stdio_upstream(counted)})
    with running_gateway(config, str(tmp_path / "l.db")) as gw:
        for _ in range(2):
            done = sync_call(gw.url, "refund", REFUND, "ticket-11", "c-1")
            assert not done.is_error, text_of(done)
    assert len(counted.read_text().splitlines()) == 1
    assert upstream.performed() == 0


def test_two_upstreams_listing_one_tool_name_stop_the_gateway(
    tmp_path: Path, upstream: Upstream
) -> None:
    both = {"shop": {"url": upstream.url}, "local": stdio_upstream(tmp_path / "c.jsonl")}
    config = gateway_config(tmp_path, upstream, upstreams=both)
    with pytest.raises(AssertionError, match="did not start"):
        start_gateway(config, str(tmp_path / "l.db"))
    assert "both list a tool 'refund'" in (tmp_path / "gateway.log").read_text()


def test_a_run_holding_steps_of_agent_code_is_refused(tmp_path: Path, upstream: Upstream) -> None:
    url = str(tmp_path / "l.db")
    with oncelog.open(url) as ledger, ledger.run("ticket-12") as run:
        run.llm("plan", lambda: {"text": "refund it"})
    with running_gateway(gateway_config(tmp_path, upstream), url) as gw:
        refused = sync_call(gw.url, "refund", REFUND, "ticket-12", "c-1")
    assert refused.is_error
    assert "holds a llm step 'plan'" in text_of(refused)
    assert upstream.received() == []
