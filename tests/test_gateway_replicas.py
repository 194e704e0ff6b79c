"""Two ``oncelog gateway`` replicas on one PostgreSQL ledger, as behind a plain load
balancer: a call re-issued to the other replica after the first was SIGKILLed mid-call
is performed once at the upstream process; a call re-issued while the first replica still
performs it waits and gets its result; a stream that breaks mid-call and is re-issued
under a new request id performs nothing more. Counted at the upstream process."""

from __future__ import annotations

import functools
import signal
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from .support.gateway import (
    Process,
    Upstream,
    call,
    gateway_config,
    kill_pid,
    running_gateway,
    start_gateway,
    sync_call,
    text_of,
    upstream_fixture,
)
from .support.pause_points import PausePoint

REFUND = {"order_id": 7, "amount": 500}
EMAIL = {"to": "a@example.com", "body": "hi"}
HANG = 60.0


upstream = upstream_fixture()


keyed_upstream = upstream_fixture(dedupe=True, name="keyed")


class Background:
    """A client call in a thread of its own, whose answer (or error) is kept."""

    def __init__(
        self, url: str, tool: str, arguments: dict[str, Any], *args: Any, **kwargs: Any
    ) -> None:
        self.outcome: list[Any] = []
        work = functools.partial(call, url, tool, arguments, *args, **kwargs)
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self.thread.start()

    def _run(self, work: Any) -> None:
        try:
            self.outcome.append(anyio.run(work))
        except Exception as exc:
            self.outcome.append(exc)

    def result(self) -> Any:
        self.thread.join(HANG)
        assert not self.thread.is_alive(), f"the call did not end within {HANG} s"
        return self.outcome[0]


def paused_gateway(config: Path, url: str, point: str) -> tuple[Process, PausePoint]:
    pause = PausePoint(point)
    gateway = start_gateway(config, url, extra_env=pause.env(), pass_fds=pause.fds())
    pause.started()
    return gateway, pause


def killed_mid_call(
    config: Path, url: str, point: str, tool: str, arguments: dict[str, Any], run: str,
    call_id: str,
) -> tuple[Any, Any]:  # fmt: skip
    """The call sent to a replica SIGKILLed at ``point`` of its step, then sent twice to
    another replica on the same ledger: the other replica's two answers."""
    first, pause = paused_gateway(config, url, f"{point}@{tool}/{call_id}")
    try:
        with running_gateway(config, url) as second:
            broken = Background(first.url, tool, arguments, run, call_id)
            kill_pid(pause.wait(HANG))  # the replica dies mid-call
            assert isinstance(broken.result(), Exception)  # and the client's stream breaks
            return (
                sync_call(second.url, tool, arguments, run, call_id),
                sync_call(second.url, tool, arguments, run, call_id),
            )
    finally:
        pause.close()
        first.kill()


@pytest.mark.parametrize("point", ["after_intent_commit", "after_call"])
def test_reissued_to_another_replica_after_a_kill_mid_call_a_keyed_call_is_performed_once(
    tmp_path: Path, pg_url: str, keyed_upstream: Upstream, point: str
) -> None:
    config = gateway_config(tmp_path, keyed_upstream)
    again, twice = killed_mid_call(config, pg_url, point, "refund", REFUND, "ticket-1", "c-1")
    assert not again.is_error, text_of(again)
    assert twice.content == again.content
    assert keyed_upstream.performed("refund") == 1


def test_reissued_to_another_replica_after_a_kill_an_unkeyed_call_waits_for_a_person(
    tmp_path: Path, pg_url: str, upstream: Upstream
) -> None:
    config = gateway_config(tmp_path, upstream)
    again, _ = killed_mid_call(config, pg_url, "after_call", "send_email", EMAIL, "ticket-2", "m-1")
    assert again.is_error
    assert "AmbiguousOutcome" in text_of(again)
    assert upstream.performed("send_email") == 1
    assert len(upstream.received("send_email")) == 1


@pytest.mark.parametrize("point", ["after_intent_commit", "after_call"])
def test_reissued_to_another_replica_after_a_kill_an_unkeyed_call_is_settled_by_its_probe(
    tmp_path: Path, pg_url: str, upstream: Upstream, point: str
) -> None:
    """With a probe declared (an upstream tool finding a call by its key), the other
    replica settles the call in doubt by asking it: sent once, never left for a person."""
    probes = {"send_email": {"tool": "find_effect", "key_argument": "key"}}
    config = gateway_config(tmp_path, upstream, probes=probes)
    again, twice = killed_mid_call(config, pg_url, point, "send_email", EMAIL, "ticket-3", "m-1")
    assert not again.is_error, text_of(again)
    assert text_of(twice) == text_of(again)
    assert upstream.performed("send_email") == 1
    assert len(upstream.received("send_email")) == 1
    assert len(upstream.received("find_effect")) == 1


def test_reissued_to_another_replica_while_in_flight_it_waits_for_the_result(
    tmp_path: Path, pg_url: str, upstream: Upstream
) -> None:
    config = gateway_config(tmp_path, upstream)
    first, pause = paused_gateway(config, pg_url, "after_call@send_email/m-3")
    try:
        with running_gateway(config, pg_url) as second:
            original = Background(first.url, "send_email", EMAIL, "ticket-3", "m-3")
            pause.wait(HANG)  # performed upstream, its outcome not yet recorded
            reissued = Background(second.url, "send_email", EMAIL, "ticket-3", "m-3")
            pause.release()
            answers = original.result(), reissued.result()
    finally:
        pause.close()
        first.kill()
    assert [a.is_error for a in answers] == [False, False], [text_of(a) for a in answers]
    assert answers[0].content == answers[1].content
    assert upstream.performed("send_email") == 1


def test_a_stream_broken_mid_call_and_reissued_under_a_new_id_performs_once(
    tmp_path: Path, upstream: Upstream
) -> None:
    config, url = gateway_config(tmp_path, upstream), str(tmp_path / "l.db")
    gateway, pause = paused_gateway(config, url, "after_call@send_email/m-4")

    async def broken_then_reissued() -> Any:
        with anyio.move_on_after(HANG):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call, gateway.url, "send_email", EMAIL, "ticket-4", "m-4")
                await anyio.to_thread.run_sync(pause.wait, HANG)
                tasks.cancel_scope.cancel()  # the client's stream breaks mid-call
        reissued = Background(gateway.url, "send_email", EMAIL, "ticket-4", "m-4")
        pause.release()
        return await anyio.to_thread.run_sync(reissued.result)

    try:
        again = anyio.run(broken_then_reissued)
    finally:
        pause.close()
        gateway.kill()
    assert not again.is_error, text_of(again)
    assert upstream.performed("send_email") == 1
    assert len(upstream.received("send_email")) == 1


def test_sigterm_lets_the_call_in_progress_finish(tmp_path: Path, upstream: Upstream) -> None:
    config, url = gateway_config(tmp_path, upstream), str(tmp_path / "l.db")
    gateway, pause = paused_gateway(config, url, "after_call@send_email/m-5")
    try:
        original = Background(
            gateway.url, "send_email", EMAIL, "ticket-5", "m-5", listed_first=True
        )
        pause.wait(HANG)
        gateway.process.send_signal(signal.SIGTERM)
        pause.release()
        answer = original.result()
        # uvicorn raises the signal again once it has shut down: its default ends it.
        assert gateway.process.wait(timeout=HANG) in (0, -signal.SIGTERM)
    finally:
        pause.close()
        gateway.kill()
    assert not answer.is_error, text_of(answer)
    assert upstream.performed("send_email") == 1
    with running_gateway(config, url) as again:  # recorded: answered, not sent again
        assert sync_call(again.url, "send_email", EMAIL, "ticket-5", "m-5").content == (
            answer.content
        )
    assert len(upstream.received("send_email")) == 1
