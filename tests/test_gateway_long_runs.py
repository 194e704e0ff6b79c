"""A gateway call in a long run costs what one in a short run does: it reads its own step
by its id and enters the run past its settled effects, so the step rows it reads do not
grow with the run (counted, not timed). Past 200 recorded calls, a gateway SIGKILLed
mid-call leaves a step in doubt that is still found: a call re-issued (a new request id, a
restarted gateway, another replica on the PostgreSQL ledger) is performed once at the
upstream process, and a new call of the run goes through the recovery of the step in
doubt before its own, or waits with it. On both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import oncelog

from .integration_agents.processes import require_framework
from .support.gateway import (
    TOKEN,
    Upstream,
    gateway_config,
    running_gateway,
    start_gateway,
    sync_call,
    text_of,
    upstream_fixture,
)

LONG = 200
EMAIL = {"to": "a@example.com", "body": "hi"}

upstream = upstream_fixture()


keyed_upstream = upstream_fixture(dedupe=True, name="keyed")


class RowsRead:
    """The step rows the store hands to the process, by wrapping the store's reads of
    steps on the ledger in use (the store itself is the real one)."""

    def __init__(self, ledger: oncelog.Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        store = ledger.store
        for name, count in (
            ("steps", len), ("replay_rows", len), ("replay_page", lambda page: page.steps),
            ("step_named", lambda step: int(step is not None)),
        ):  # fmt: skip
            monkeypatch.setattr(store, name, self._counted(getattr(store, name), count))

    def _counted(self, read: Any, count: Any) -> Any:
        def counted(*args: Any) -> Any:
            found = read(*args)
            self.rows += count(found)
            return found

        return counted


@pytest.fixture
def gateway_ledger(store_url: str) -> Iterator[oncelog.Ledger]:
    require_framework("mcp", "gateway")
    with oncelog.open(store_url) as ledger:
        yield ledger


def test_a_call_reads_as_many_step_rows_in_a_long_run_as_in_a_short_one(
    gateway_ledger: oncelog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from oncelog.integrations._common import Policy
    from oncelog.integrations._gateway_calls import Asked, perform

    sent: list[str] = []

    def forward(tool: str, arguments: Any, key: str) -> Any:
        sent.append(key)
        return {"content": [{"type": "text", "text": key}]}

    def policy_of(tool: str, kind: str) -> Policy:
        return Policy("create")

    def call(run_id: str, number: int) -> Any:
        arguments = {"to": "a@example.com", "body": str(number)}
        asked = Asked(run_id, f"send_email/m-{number}", "send_email", arguments, "d",
                      Policy("create"))  # fmt: skip
        return perform(gateway_ledger, asked, forward, policy_of, None, 5.0)

    for number in range(LONG):
        call("long", number)
    for number in range(10):
        call("short", number)
    counted = RowsRead(gateway_ledger, monkeypatch)
    rows = []
    for run_id in ("short", "long"):
        before = counted.rows
        call(run_id, LONG + 1)
        rows.append(counted.rows - before)
    assert rows[0] == rows[1], rows  # a new call: the same rows however long its run
    before = counted.rows
    assert call("long", 3) == {"content": [{"type": "text", "text": sent[3]}]}
    assert counted.rows - before == 1  # asked again: its one step, and no run taken
    assert len(sent) == LONG + 10 + 2


async def _calls_in_one_session(url: str, run: str, count: int) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        for number in range(count):
            meta: Any = {"io.oncelog/run-id": run, "io.oncelog/call-id": f"m-{number}"}
            done = await client.session.call_tool("send_email", EMAIL, meta=meta)
            assert not done.is_error, text_of(done)


def a_long_run(config: Path, url: str, run: str) -> None:
    with running_gateway(config, url) as gw:
        anyio.run(_calls_in_one_session, gw.url, run, LONG)


def killed_at(config: Path, url: str, point: str, tool: str, args: dict[str, Any],
              run: str, call_id: str) -> None:  # fmt: skip
    doomed = start_gateway(config, url, crash_at=f"{point}@{tool}/{call_id}")
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the stream breaks, as it may
            sync_call(doomed.url, tool, args, run, call_id)
        assert doomed.process.wait(timeout=30) == -9
    finally:
        doomed.kill()


@pytest.mark.parametrize("point", ["after_intent_commit", "after_call"])
def test_past_200_calls_a_keyed_call_killed_mid_call_is_performed_once(
    tmp_path: Path, keyed_upstream: Upstream, point: str, store_url: str
) -> None:
    """refund declares a dedupe_window its upstream honours. Killed mid-call after 200
    calls of its run, it is in doubt: the run's next call (another one) first sends it
    again with its key, then performs its own; the killed call re-issued is answered
    from the ledger. Each is performed once."""
    config, url = gateway_config(tmp_path, keyed_upstream), store_url
    a_long_run(config, url, "ticket-long")
    killed_at(config, url, point, "refund", {"order_id": 1, "amount": 5}, "ticket-long", "c-1")
    with running_gateway(config, url) as gw:
        other = sync_call(gw.url, "refund", {"order_id": 2, "amount": 5}, "ticket-long", "c-2")
        assert not other.is_error, text_of(other)
        again = sync_call(gw.url, "refund", {"order_id": 1, "amount": 5}, "ticket-long", "c-1")
        assert not again.is_error, text_of(again)
    assert keyed_upstream.performed("send_email") == LONG
    performed = [e["arguments"]["order_id"] for e in _performed(keyed_upstream, "refund")]
    assert sorted(performed) == [1, 2]
    with oncelog.open(url) as ledger:
        steps = ledger.steps("ticket-long")
    assert [s.step_id for s in steps[LONG:]] == ["refund/c-1", "refund/c-2"]
    assert {s.state for s in steps} == {oncelog.StepState.DONE}


def test_past_200_calls_an_unkeyed_call_in_doubt_holds_the_runs_next_call(
    tmp_path: Path, upstream: Upstream, store_url: str
) -> None:
    """send_email (create, no window) killed after its intent, 200 calls into its run:
    the run's next call (another one) is not performed past it: it is the step in doubt,
    for a person, that the call answers; once a person resolves it, the next call runs."""
    config, url = gateway_config(tmp_path, upstream), store_url
    a_long_run(config, url, "ticket-long")
    killed_at(config, url, "after_intent_commit", "send_email", EMAIL, "ticket-long", "m-x")
    with running_gateway(config, url) as gw:
        held = sync_call(gw.url, "send_email", EMAIL, "ticket-long", "m-y")
        assert held.is_error
        assert "AmbiguousOutcome" in text_of(held), text_of(held)
        assert "send_email/m-x" in text_of(held), text_of(held)
        assert len(upstream.received("send_email")) == LONG  # neither m-x nor m-y sent
        with oncelog.open(url) as ledger:
            ledger.resolve("ticket-long", "send_email/m-x", "not_done", by="ana")
        done = sync_call(gw.url, "send_email", EMAIL, "ticket-long", "m-y")
        assert not done.is_error, text_of(done)
    # m-x, not done, was sent again on the walk (a person said it did not happen), then m-y.
    assert upstream.performed("send_email") == LONG + 2


def _performed(upstream: Upstream, tool: str) -> list[dict[str, Any]]:
    return [
        entry
        for entry in map(json.loads, upstream.count_file.read_text().splitlines())
        if entry["tool"] == tool
    ]
