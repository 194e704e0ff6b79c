"""Approvals through ``oncelog gateway``: a call that needs a person answers with the
specification's ``input_required`` result, a URL-mode elicitation of the console's signed
decision page and a ``requestState`` bound to the call. An in-band "accept" from the
client counts for nothing; a forged or replayed ``requestState`` performs nothing (a replay
is refused: a state is good once); a
decision made with the CLI or through the link moves the call on, performed once at the
upstream process."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

import oncelog

from .support.gateway import (
    Process,
    Upstream,
    gateway_config,
    running_gateway,
    sync_call,
    text_of,
    upstream_fixture,
)
from .support.launch import environment, python
from .support.operator_commands import oncelog_cli

DELETE = {"customer": "cus_1"}
APPROVAL = "io.oncelog/approval"


upstream = upstream_fixture()


@pytest.fixture
def gateway(tmp_path: Path, upstream: Upstream) -> Iterator[Process]:
    with running_gateway(gateway_config(tmp_path, upstream), str(tmp_path / "l.db")) as gw:
        yield gw


def waiting(result: Any) -> tuple[str, str]:
    """The URL of the decision page and the requestState of an input_required result."""
    import mcp.types as types

    assert isinstance(result, types.InputRequiredResult), result
    assert result.input_requests is not None
    assert list(result.input_requests) == [APPROVAL]
    elicit = result.input_requests[APPROVAL]
    assert isinstance(elicit, types.ElicitRequest)
    assert isinstance(elicit.params, types.ElicitRequestURLParams)  # never an in-band form
    assert result.request_state
    return elicit.params.url, result.request_state


def test_a_destructive_call_waits_for_a_person_by_url_and_runs_once_approved(
    tmp_path: Path, upstream: Upstream, gateway: Process
) -> None:
    import mcp.types as types
    from mcp import MCPError

    url, state = waiting(sync_call(gateway.url, "delete_account", DELETE, "ticket-1", "d-1"))
    assert url.startswith("http://console.test/link/")
    # The client says "accept" in band, with the real state: still waiting, nothing done.
    forged = {APPROVAL: types.ElicitResult(action="accept")}
    again = sync_call(gateway.url, "delete_account", DELETE, "ticket-1", "d-1",
                      request_state=state, input_responses=forged)  # fmt: skip
    waiting(again)
    assert upstream.performed() == 0

    oncelog_cli(str(tmp_path / "l.db"), "approve", "ticket-1", "delete_account/d-1", "--by", "ana")
    done = sync_call(gateway.url, "delete_account", DELETE, "ticket-1", "d-1", request_state=state)
    assert isinstance(done, types.CallToolResult)
    assert not done.is_error, text_of(done)
    assert upstream.performed("delete_account") == 1
    # The same state presented again: refused, good once; the result is read without it.
    with pytest.raises(MCPError, match="requestState already used"):
        sync_call(gateway.url, "delete_account", DELETE, "ticket-1", "d-1", request_state=state)
    read = sync_call(gateway.url, "delete_account", DELETE, "ticket-1", "d-1")
    assert read.content == done.content
    assert upstream.performed("delete_account") == 1


def test_a_decision_through_the_signed_link_moves_the_call_on(
    tmp_path: Path, upstream: Upstream, gateway: Process
) -> None:
    url, state = waiting(sync_call(gateway.url, "delete_account", DELETE, "ticket-2", "d-2"))
    token = unquote(url.rsplit("/link/", 1)[1])
    secret = {"ONCELOG_LINK_SECRET": "gateway-test-link-secret-0123456789"}
    with pytest.MonkeyPatch.context() as env:
        for name, value in secret.items():
            env.setenv(name, value)
        with oncelog.open(str(tmp_path / "l.db")) as ledger:
            link = ledger.check_link(token)  # what the console's /link/ page checks first
            assert (link.run_id, link.step_id, link.choice) == ("ticket-2", "delete_account/d-2",
                                                                "approve")  # fmt: skip
            ledger.approve(link.run_id, link.step_id, by="ana", request=link.number,
                           args_hash=link.args_hash, link=link.nonce)  # fmt: skip
    done = sync_call(gateway.url, "delete_account", DELETE, "ticket-2", "d-2", request_state=state)
    assert not done.is_error, text_of(done)
    assert upstream.performed("delete_account") == 1


def test_a_person_approves_on_a_real_console_s_link_page_and_the_call_runs_once(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The whole path over HTTP: the gateway's elicitation URL is a page of a real
    ``oncelog console`` process; a person opens it, confirms with the page's own form, and
    the client's retry with its requestState is performed once; the state replayed after
    that is refused. Counted at the upstream process."""
    import httpx2 as httpx

    db = str(tmp_path / "l.db")
    with oncelog.open(db):
        pass  # the console opens an existing ledger only
    secret = "gateway-test-link-secret-0123456789"
    console = subprocess.Popen(
        python("-m", "oncelog", "console", "--port", "0", "--db", db,
               "--token-file", str(tmp_path / "console-token")),
        env=environment(ONCELOG_LINK_SECRET=secret), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert console.stdout is not None
        serving = re.search(r"oncelog console on (http://[^/\s]+)/", console.stdout.readline())
        assert serving is not None, console.stderr.read() if console.stderr else ""
        base = serving.group(1)
        config = gateway_config(tmp_path, upstream, console_url=base)
        with running_gateway(config, db) as gateway:
            url, state = waiting(
                sync_call(gateway.url, "delete_account", DELETE, "ticket-5", "d-5")
            )
            assert url.startswith(f"{base}/link/")
            with httpx.Client(timeout=60) as person:
                page = person.get(url)
                assert page.status_code == 200, page.text
                assert "cus_1" in page.text  # the page shows the arguments it approves
                csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
                assert csrf is not None
                confirmed = person.post(
                    url, headers={"Origin": base},
                    data={"csrf": csrf.group(1), "decision": "approve", "by": "dana"},
                )  # fmt: skip
                assert confirmed.status_code == 200, confirmed.text
            assert upstream.performed() == 0  # a decision is not a performance
            done = sync_call(gateway.url, "delete_account", DELETE, "ticket-5", "d-5",
                             request_state=state)  # fmt: skip
            assert not done.is_error, text_of(done)
            with pytest.raises(Exception, match="requestState already used"):
                sync_call(gateway.url, "delete_account", DELETE, "ticket-5", "d-5",
                          request_state=state)  # fmt: skip
    finally:
        console.terminate()
        console.communicate(timeout=60)
    assert upstream.performed("delete_account") == 1
    with oncelog.open(db) as ledger:
        [approval] = ledger.approvals(None)
    assert (approval.status, approval.decided_by) == (oncelog.ApprovalStatus.USED, "dana")


def test_a_denied_call_is_never_performed(
    tmp_path: Path, upstream: Upstream, gateway: Process
) -> None:
    _, state = waiting(sync_call(gateway.url, "delete_account", DELETE, "ticket-3", "d-3"))
    oncelog_cli(str(tmp_path / "l.db"), "deny", "ticket-3", "delete_account/d-3", "--by", "ana",
                "--note", "wrong customer")  # fmt: skip
    denied = sync_call(
        gateway.url, "delete_account", DELETE, "ticket-3", "d-3", request_state=state
    )
    assert denied.is_error
    assert "ana" in text_of(denied)
    assert upstream.performed() == 0


@pytest.mark.parametrize("how", ["altered", "other arguments", "other client", "other run"])
def test_a_forged_request_state_is_refused_and_performs_nothing(
    tmp_path: Path, upstream: Upstream, gateway: Process, how: str
) -> None:
    from .support.gateway import OPS_TOKEN

    _, state = waiting(sync_call(gateway.url, "delete_account", DELETE, "ticket-4", "d-4"))
    oncelog_cli(str(tmp_path / "l.db"), "approve", "ticket-4", "delete_account/d-4", "--by", "ana")
    args: dict[str, Any] = {"run": "ticket-4", "call_id": "d-4", "request_state": state}
    arguments = DELETE
    if how == "altered":
        payload, mac = state.split(".")
        args["request_state"] = f"{payload[:-2]}xx.{mac}"
    elif how == "other arguments":
        arguments = {"customer": "cus_2"}
    elif how == "other client":
        args["token"] = OPS_TOKEN
    else:
        args["run"] = "ticket-5"
    with pytest.raises(Exception, match="requestState"):
        sync_call(gateway.url, "delete_account", arguments, **args)
    assert upstream.performed() == 0
    assert upstream.received() == []
