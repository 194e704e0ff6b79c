"""An upstream that goes away while ``oncelog gateway`` runs: the calls made to it fail,
never the gateway. A call whose connection could not be made was not sent: recorded not
performed, it is sent when the client asks again after the upstream is back (its subject
free meanwhile, no budget spent, an approval asked again: one lets one attempt through).
A call in flight when the upstream died is in doubt, and a person's way out is the usual
one. A stdio upstream that exited is started again. An upstream down when the gateway
starts stops the start with a clear error. Counted at the upstream processes.

(Before the links were kept apart, the first call to an unreachable HTTP upstream ended
the gateway process, and a stdio upstream that exited left every later call in doubt.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import oncelog

from .support.gateway import (
    Upstream,
    counting_upstream,
    gateway_argv,
    gateway_config,
    gateway_env,
    port_of,
    running_gateway,
    sync_call,
    text_of,
    upstream_fixture,
)
from .support.operator_commands import oncelog_cli
from .test_gateway_approvals import waiting

EMAIL = {"to": "a@example.com", "body": "hi"}
UNSENT = "could not be reached"

upstream = upstream_fixture()


def test_a_call_to_an_upstream_that_is_down_is_not_sent_and_is_sent_once_it_is_back(
    tmp_path: Path, upstream: Upstream
) -> None:
    url = str(tmp_path / "l.db")
    with running_gateway(gateway_config(tmp_path, upstream), url) as gw:
        upstream.kill()
        for _ in range(2):  # each call again meets the same closed port, the gateway up
            down = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
            assert down.is_error
            assert UNSENT in text_of(down)
            assert "nothing was sent" in text_of(down)
        assert gw.process.poll() is None
        with counting_upstream(tmp_path, port=port_of(upstream)) as back:
            sent = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
            assert not sent.is_error, text_of(sent)
            again = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
            assert again.content == sent.content
            assert back.performed("send_email") == 1
            assert len(back.received("send_email")) == 1


def test_a_subject_whose_call_was_not_sent_is_performed_once_across_runs(
    tmp_path: Path, upstream: Upstream
) -> None:
    """Order 42 (``once_per``, with a window) asked by ticket-1 while the upstream is down:
    not sent. Once it is back, ticket-2's refund of the order is performed, and ticket-1's
    asked again gets that refund's result: one refund, whichever run asks first."""
    url, refund = str(tmp_path / "l.db"), {"order_id": 42, "amount": 5}
    with running_gateway(gateway_config(tmp_path, upstream), url) as gw:
        upstream.kill()
        down = sync_call(gw.url, "refund", refund, "ticket-1", "r-1")
        assert UNSENT in text_of(down)
        with counting_upstream(tmp_path, port=port_of(upstream)) as back:
            other = sync_call(gw.url, "refund", refund, "ticket-2", "r-1")
            assert not other.is_error, text_of(other)
            first = sync_call(gw.url, "refund", refund, "ticket-1", "r-1")
            assert not first.is_error, text_of(first)
            assert first.content == other.content
            assert back.performed("refund") == 1
            assert len(back.received("refund")) == 1


def test_calls_not_sent_spend_no_budget(tmp_path: Path, upstream: Upstream) -> None:
    """The agent may make two calls a day; one call asked three times while the upstream
    is down spends one of them (a budget counts steps, not attempts), so two runs' calls
    are performed once it is back."""
    config, url = gateway_config(tmp_path, upstream, agent="billing"), str(tmp_path / "l.db")
    with oncelog.open(url) as ledger:
        ledger.set_agent_budget("billing", oncelog.AgentBudget(calls=2), by="ops")
    with running_gateway(config, url) as gw:
        upstream.kill()
        for _ in range(3):
            assert UNSENT in text_of(sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1"))
        with counting_upstream(tmp_path, port=port_of(upstream)) as back:
            for run in ("ticket-1", "ticket-2"):
                sent = sync_call(gw.url, "send_email", EMAIL, run, "m-1")
                assert not sent.is_error, text_of(sent)
            assert back.performed("send_email") == 2


def test_an_approved_call_not_sent_asks_the_person_again_and_is_performed_once(
    tmp_path: Path, upstream: Upstream
) -> None:
    """A person approved the deletion; the client's call with its requestState meets the
    upstream down: not sent. An approval lets one attempt through (as everywhere in
    oncelog), so the call sent again once the upstream is back asks the person again,
    sending nothing; approved again, it is performed once."""
    url, customer = str(tmp_path / "l.db"), {"customer": "cus_1"}
    with running_gateway(gateway_config(tmp_path, upstream), url) as gw:
        _, state = waiting(sync_call(gw.url, "delete_account", customer, "ticket-1", "d-1"))
        oncelog_cli(url, "approve", "ticket-1", "delete_account/d-1", "--by", "ana")
        upstream.kill()
        down = sync_call(gw.url, "delete_account", customer, "ticket-1", "d-1",
                         request_state=state)  # fmt: skip
        assert UNSENT in text_of(down)
        with counting_upstream(tmp_path, port=port_of(upstream)) as back:
            _, again = waiting(sync_call(gw.url, "delete_account", customer, "ticket-1", "d-1",
                                         request_state=state))  # fmt: skip
            assert back.received() == []
            oncelog_cli(url, "approve", "ticket-1", "delete_account/d-1", "--by", "ana")
            done = sync_call(gw.url, "delete_account", customer, "ticket-1", "d-1",
                             request_state=again)  # fmt: skip
            assert not done.is_error, text_of(done)
            assert back.performed("delete_account") == 1


def test_an_upstream_killed_mid_call_leaves_that_call_in_doubt_and_the_gateway_up(
    tmp_path: Path,
) -> None:
    """The upstream dies while it holds the call (it would have acted after a pause): the
    call is in doubt, for a person; the gateway stays up, reaches the upstream restarted
    for the next call, and the person's ``not_done`` lets the first be sent, once."""
    url = str(tmp_path / "l.db")
    with counting_upstream(tmp_path, delay=60) as slow:
        config = gateway_config(tmp_path, slow)
        with running_gateway(config, url) as gw:
            with _in_background(gw.url, "send_email", EMAIL, "ticket-1", "m-1") as answer:
                _wait_for(lambda: slow.received("send_email"))
                slow.kill()
            assert answer[0].is_error
            assert "AmbiguousOutcome" in text_of(answer[0]), text_of(answer[0])
            assert gw.process.poll() is None
            with counting_upstream(tmp_path, port=port_of(slow)) as back:
                other = sync_call(gw.url, "send_email", EMAIL, "ticket-2", "m-1")
                assert not other.is_error, text_of(other)
                oncelog_cli(url, "resolve", "ticket-1", "send_email/m-1", "not_done",
                            "--by", "ana")  # fmt: skip
                first = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
                assert not first.is_error, text_of(first)
                assert back.performed("send_email") == 2


def test_a_stdio_upstream_that_exited_is_started_again(tmp_path: Path, upstream: Upstream) -> None:
    """The child is SIGKILLed between calls: the gateway sees its output end, and the next
    call starts a new child and is performed by it (not sent into the closed pipes, where
    it would be in doubt)."""
    counted = tmp_path / "stdio-count.jsonl"
    command = [sys.executable, "-m", "tests.support.mcp_counting_upstream", "--stdio",
               "--count-file", str(counted)]  # fmt: skip
    config = gateway_config(tmp_path, upstream, upstreams={"local": {"command": command}})
    with running_gateway(config, str(tmp_path / "l.db")) as gw:
        assert not sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1").is_error
        os.kill(_performed(counted)[0]["pid"], signal.SIGKILL)
        log = tmp_path / "gateway.log"
        _wait_for(lambda: "stdio upstream 'local' exited" in log.read_text())
        for run in ("ticket-2", "ticket-3"):
            sent = sync_call(gw.url, "send_email", EMAIL, run, "m-1")
            assert not sent.is_error, text_of(sent)
    performed = _performed(counted)
    assert len(performed) == len({e["key"] for e in performed}) == 3
    assert len({e["pid"] for e in performed}) == 2  # one child, then one started again


def test_an_upstream_down_at_the_start_stops_the_gateway_with_a_clear_error(
    tmp_path: Path, upstream: Upstream
) -> None:
    config = gateway_config(tmp_path, upstream)
    upstream.kill()
    started = subprocess.run(
        gateway_argv(config, str(tmp_path / "l.db")), env=gateway_env(config),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert started.returncode == 75, started.stderr
    assert "upstream 'shop' could not be reached" in started.stderr
    assert "Traceback" not in started.stderr


@contextmanager
def _in_background(*call: Any) -> Iterator[list[Any]]:
    """``sync_call(*call)`` made in a thread; its answer in the list, once the block ends."""
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(sync_call(*call)))
    thread.start()
    try:
        yield answer
    finally:
        thread.join(timeout=120)
    assert answer, "the call never answered"


def _wait_for(condition: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds} s")
        time.sleep(0.05)


def _performed(count_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in count_file.read_text().splitlines() if line]
