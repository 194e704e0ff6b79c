"""Provider declarations: a tool declared with ``provider=`` takes the provider's window,
its answers to a repeated key and its probe; a longer window is refused; and the answers
are read from a real HTTP answer, counted at a provider process."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

import oncelog
from oncelog import providers
from oncelog.failures import Failure, first
from oncelog.failures import httpx as httpx_failures
from oncelog.failures.keys import KeyAnswer, answers

from .support.launch import environment, python, run_python
from .support.provider_process import running_provider

KEY_PROVIDER = Path(__file__).parent / "support" / "key_provider.py"
AGENT = Path(__file__).parent / "crash_agents" / "provider_agent.py"
KEY_AGENT = Path(__file__).parent / "crash_agents" / "key_agent.py"
DOCS = Path(__file__).parents[1] / "docs" / "providers.md"
DAY = 24 * 3600.0


@dataclass(frozen=True)
class KeyProvider:
    url: str
    requests: Path

    def keys(self) -> list[str]:
        return self.requests.read_text().splitlines() if self.requests.exists() else []


@contextmanager
def key_provider(folder: Path, status: int, body: dict[str, Any]) -> Iterator[KeyProvider]:
    """A provider process answering every POST with ``status`` and ``body``."""
    log = folder / "requests"
    answer = ("--status", str(status), "--body", json.dumps(body))
    command = python(KEY_PROVIDER, "--requests", log, *answer)
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("PORT "), line
            yield KeyProvider(f"http://127.0.0.1:{int(line.split()[1])}/send", log)
        finally:
            process.kill()


def send(url: str, *, idempotency_key: str) -> dict[str, Any]:
    answer = httpx.post(url, json={}, headers={"Idempotency-Key": idempotency_key})
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


def raised_by_httpx(url: str) -> BaseException:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        send(url, idempotency_key="k")
    return caught.value


def raised_by_requests(url: str) -> BaseException:
    with pytest.raises(requests.HTTPError) as caught:
        requests.post(url, json={}, headers={"Idempotency-Key": "k"}, timeout=10).raise_for_status()
    return caught.value


def noop(*, idempotency_key: str) -> None:
    del idempotency_key


# -- declaring ------------------------------------------------------------------------


def test_a_provider_gives_its_published_window_and_classifier() -> None:
    spec = oncelog.tool(kind="create", provider=providers.resend)(noop).spec
    assert spec.dedupe_window == DAY
    assert spec.failures is not None
    assert oncelog.tool(kind="create", provider=providers.nylas)(noop).spec.dedupe_window == 3600


def test_an_unpublished_window_gives_none() -> None:
    for unpublished in (providers.paypal, providers.square):
        assert unpublished.dedupe_window is None
        assert oncelog.tool(kind="payment", provider=unpublished)(noop).spec.dedupe_window is None


def test_a_shorter_window_of_the_tool_wins_and_a_longer_one_is_refused() -> None:
    shorter = oncelog.tool(kind="payment", provider=providers.stripe, dedupe_window=600)(noop)
    assert shorter.spec.dedupe_window == 600
    with pytest.raises(oncelog.ConfigurationError, match="longer than Stripe's published"):
        oncelog.tool(kind="payment", provider=providers.stripe, dedupe_window=timedelta(days=2))
    longer = pytest.raises(oncelog.ConfigurationError, match="longer than Nylas's")
    with longer, pytest.warns(DeprecationWarning, match="key_ttl is now dedupe_window"):
        oncelog.tool(kind="create", provider=providers.nylas, key_ttl=7200)


def test_only_a_provider_is_a_provider() -> None:
    with pytest.raises(oncelog.ConfigurationError, match=r"oncelog\.providers\.Provider"):
        oncelog.tool(kind="payment", provider="stripe")  # type: ignore[arg-type]


def test_stripe_brings_its_shipped_probe_and_a_tools_own_probe_wins() -> None:
    from oncelog.probes.stripe import find_payment

    assert oncelog.tool(kind="payment", provider=providers.stripe)(noop).spec.probe is find_payment

    def mine(key: str, *args: Any, **kwargs: Any) -> oncelog.ProbeAnswer:
        return oncelog.CANNOT_TELL

    declared = oncelog.tool(kind="payment", provider=providers.stripe, probe=mine)(noop)
    assert declared.spec.probe is mine


def test_a_tool_without_a_key_cannot_take_a_providers_window() -> None:
    with pytest.raises(oncelog.ConfigurationError, match="idempotency_key"):
        oncelog.tool(kind="create", provider=providers.resend)(lambda: None)


# -- the answers to a repeated key, read from real HTTP answers ----------------------

NYLAS_BUSY = {"request_id": "r1", "error": {"type": "api.concurrent_idempotent_request"}}
NYLAS_OTHER = {"request_id": "r2", "error": {"type": "api.invalid_idempotent_request"}}
RESEND_OTHER = {"statusCode": 409, "name": "invalid_idempotent_request", "message": "..."}
STRIPE_OTHER = {"error": {"type": "idempotency_error", "message": "Keys for idempotent..."}}
STRIPE_BUSY = {"error": {"type": "invalid_request_error", "code": "idempotency_key_in_use"}}


@pytest.mark.parametrize("client", [raised_by_httpx, raised_by_requests])
@pytest.mark.parametrize(
    ("provider", "status", "body", "failure"),
    [
        pytest.param(providers.nylas, 409, NYLAS_BUSY, Failure.IN_PROGRESS, id="nylas-busy"),
        pytest.param(providers.nylas, 409, NYLAS_OTHER, Failure.KEY_MISMATCH, id="nylas-other"),
        pytest.param(providers.resend, 409, RESEND_OTHER, Failure.KEY_MISMATCH, id="resend"),
        pytest.param(providers.stripe, 400, STRIPE_OTHER, Failure.KEY_MISMATCH, id="stripe"),
        pytest.param(providers.stripe, 409, STRIPE_BUSY, Failure.IN_PROGRESS, id="stripe-busy"),
        pytest.param(providers.nylas, 409, {"error": {"type": "other"}}, None, id="other-code"),
        pytest.param(providers.nylas, 400, NYLAS_BUSY, None, id="other-status"),
    ],
)
def test_documented_answers_are_read_from_the_answer(
    tmp_path: Path, client: Any, provider: providers.Provider, status: int,
    body: dict[str, Any], failure: Failure | None,
) -> None:  # fmt: skip
    with key_provider(tmp_path, status, body) as server:
        assert provider.classify(client(server.url)) is failure


def test_an_answer_not_read_yet_is_not_read_by_the_classifier(tmp_path: Path) -> None:
    with (
        key_provider(tmp_path, 409, NYLAS_BUSY) as server,
        httpx.Client() as client,
        client.stream("POST", server.url) as answer,
    ):
        error = httpx.HTTPStatusError("409", request=answer.request, response=answer)
        assert providers.nylas.classify(error) is None
        assert json.loads(answer.read()) == NYLAS_BUSY  # still the caller's to read


def test_a_streamed_requests_answer_is_left_unread(tmp_path: Path) -> None:
    with key_provider(tmp_path, 409, NYLAS_BUSY) as server:
        answer = requests.post(server.url, json={}, stream=True, timeout=10)
        with pytest.raises(requests.HTTPError) as caught:
            answer.raise_for_status()
        assert providers.nylas.classify(caught.value) is None
        assert answer.json() == NYLAS_BUSY  # still the caller's to read


def test_a_provider_declares_what_can_be_checked() -> None:
    with pytest.raises(oncelog.ConfigurationError, match="where its figures"):
        providers.Provider("X", "Idempotency-Key", timedelta(hours=1), None, None, ())
    with pytest.raises(oncelog.ConfigurationError, match="positive"):
        providers.Provider("X", "Idempotency-Key", timedelta(0), None, None, ("https://x",))
    with pytest.raises(oncelog.ConfigurationError, match="4xx or 5xx"):
        KeyAnswer(200, "ok")


def test_key_answers_come_before_a_tools_own_classifier() -> None:
    declared = oncelog.tool(
        kind="create", provider=providers.nylas, failures=httpx_failures.classify
    )(noop)
    classify = declared.spec.failures
    assert classify is not None
    request = httpx.Request("POST", "http://127.0.0.1/")
    busy = httpx.Response(409, json=NYLAS_BUSY, request=request)
    error = httpx.HTTPStatusError("409", request=request, response=busy)
    assert classify(error) is Failure.IN_PROGRESS  # by status alone: in doubt
    other = httpx.Response(409, json={"error": {"type": "x"}}, request=request)
    plain = httpx.HTTPStatusError("409", request=request, response=other)
    assert classify(plain) is first(httpx_failures.classify)(plain) is Failure.IN_DOUBT


def test_answers_of_a_clients_own_error() -> None:
    class ClientError(Exception):
        def __init__(self, status_code: int, code: str) -> None:
            super().__init__(code)
            self.status_code, self.code = status_code, code

    classify = answers(in_progress=KeyAnswer(409, "busy"), mismatch=None)
    assert classify(ClientError(409, "busy")) is Failure.IN_PROGRESS
    assert classify(ClientError(409, "other")) is None
    assert classify(ValueError("no answer")) is None


# -- through a run: counted at the provider -------------------------------------------


def nylas_send(url: str) -> oncelog.Tool[..., dict[str, Any]]:
    return oncelog.tool(kind="create", name="send", provider=providers.nylas)(
        lambda *, idempotency_key: send(url, idempotency_key=idempotency_key)
    )


def test_a_key_held_for_other_parameters_is_sent_once_and_halts_until_a_person_decides(
    store_url: str, tmp_path: Path
) -> None:
    """Inside the window the call halts at once, with no resend in the same process; its
    recorded reason says why, so a later start, in a process of its own, sends nothing
    (the provider would answer the same) and halts again: never a new key, never recorded
    done or failed, until a person decides, after which the run goes on without a send."""
    with key_provider(tmp_path, 409, NYLAS_OTHER) as server:
        for start in (1, 2, 3):
            halted = run_python(KEY_AGENT, store_url, "r", server.url)
            assert halted.returncode == oncelog.EXIT_HALTED, halted.stderr
            with oncelog.open(store_url) as ledger:
                [step] = ledger.steps("r")
            assert step.state is oncelog.StepState.UNKNOWN
            assert server.keys() == [step.key], f"start {start} sent again"
        assert "other parameters" in halted.stderr
        with oncelog.open(store_url) as ledger:
            ledger.resolve("r", "send", "done", by="ops", result={"id": "at-the-provider"})
        done = run_python(KEY_AGENT, store_url, "r", server.url)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"id": "at-the-provider"}
        assert len(server.keys()) == 1


def test_a_probe_settles_a_key_held_for_other_parameters_at_a_later_start(
    ledger: oncelog.Ledger, tmp_path: Path
) -> None:
    """A restart asks the declared probe: its ``Found`` records the step done, with no
    send; its "not found" sends nothing either (the key's answer would be the same)."""
    answers: list[oncelog.ProbeAnswer] = [oncelog.CANNOT_TELL, oncelog.NOT_FOUND]
    answers.append(oncelog.Found({"id": "found"}))

    def probe(key: str, *args: Any, **kwargs: Any) -> oncelog.ProbeAnswer:
        return answers.pop(0)

    with key_provider(tmp_path, 409, NYLAS_OTHER) as server:
        tool = oncelog.tool(kind="create", name="send", provider=providers.nylas, probe=probe)(
            lambda *, idempotency_key: send(server.url, idempotency_key=idempotency_key)
        )
        for _ in range(2):  # the failing call's probe, then the restart's
            with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
                run.effect("send", tool)
        with ledger.run("r") as run:
            assert run.effect("send", tool) == {"id": "found"}
        assert len(server.keys()) == 1
        assert answers == []


def test_a_key_still_in_flight_stops_and_sends_again_later(
    ledger: oncelog.Ledger, tmp_path: Path
) -> None:
    with key_provider(tmp_path, 409, NYLAS_BUSY) as server:
        tool = nylas_send(server.url)
        with pytest.raises(oncelog.ResendLater), ledger.run("r") as run:
            run.effect("send", tool)
        [step] = ledger.steps("r")
        assert step.state is oncelog.StepState.IN_FLIGHT
        assert server.keys() == [step.key]


# -- killed agents: what the declaration alone decides, counted at the provider --------


def pay(store_url: str, url: str, name: str, crash_at: str | None = None) -> Any:
    return run_python(AGENT, store_url, "r", url, name, env=environment(crash_at=crash_at))


def test_killed_inside_the_providers_window_is_sent_again_once(
    store_url: str, tmp_path: Path
) -> None:
    """Adyen's published window (31 days) lets the restart send the payment again with
    its key; a provider that honours keys performs it once."""
    with running_provider(tmp_path / "provider", "honours_keys") as provider:
        assert pay(store_url, provider.url, "adyen", "after_call@pay").returncode == -9
        again = pay(store_url, provider.url, "adyen")
        assert again.returncode == 0, again.stderr
        with oncelog.open(store_url) as ledger:
            [step] = ledger.steps("r")
        assert provider.counts("r") == {step.key: 1}
        assert (step.state, step.attempts) == (oncelog.StepState.DONE, 2)


def test_killed_at_a_provider_with_no_published_window_halts(
    store_url: str, tmp_path: Path
) -> None:
    """PayPal publishes no window: nothing is sent again, a person decides."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        assert pay(store_url, provider.url, "paypal", "after_call@pay").returncode == -9
        halted = pay(store_url, provider.url, "paypal")
        assert halted.returncode == oncelog.EXIT_HALTED, halted.stderr
        assert provider.total("r") == 1


# -- the docs -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", providers.KNOWN, ids=lambda p: p.name)
def test_docs_list_every_figure_with_its_sources(provider: providers.Provider) -> None:
    text = DOCS.read_text()
    [row] = [line for line in text.splitlines() if line.startswith(f"| {provider.name} |")]
    assert f"`{provider.key_field}`" in row
    window = "unpublished" if provider.dedupe_window is None else _words(provider.dedupe_window)
    assert window in row
    for answer in (provider.in_progress, provider.mismatch):
        if answer is not None:
            assert f"`{answer.status} {answer.code}`" in row
    for source in provider.sources:
        assert source in text


def _words(window: timedelta) -> str:
    hours = window.total_seconds() / 3600
    return f"{hours / 24:g} days" if hours >= 48 else f"{hours:g} h"


def test_the_public_names() -> None:
    named = {getattr(providers, n) for n in providers.__all__ if re.fullmatch("[a-z]+", n)}
    assert set(providers.KNOWN) == named
    assert len({p.name for p in providers.KNOWN}) == len(providers.KNOWN)
