"""A person's way out of an effect that did not happen: ``oncelog retry`` (and ``redrive``)
give it a fresh set of attempts with the same key, the steps before it kept, journalled
with who and why; what could perform an effect twice (done, in doubt, abandoned, a run
that went past it) is refused with the command that fits. The agent is a real process,
the provider another one, which counts what it performed; both stores.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import oncelog

from .support.console_client import console_client
from .support.launch import run_python
from .support.provider_process import Provider

MAILER = Path(__file__).parent / "retry_agents" / "mailer.py"


def closed_port() -> str:
    """The address of a port nobody listens on: every connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def mailer(
    store_url: str, provider: Provider, email_service: str
) -> subprocess.CompletedProcess[str]:
    return run_python(MAILER, store_url, "m-a", provider.url, email_service)


def cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "oncelog", *args, "--db", store_url)


def performed(provider: Provider) -> Counter[str]:
    return Counter(effect.payload["tool"] for effect in provider.effects("m-a"))


def test_an_effect_whose_retries_ran_out_is_retried_with_the_same_key(
    store_url: str, provider: Provider
) -> None:
    refusing = closed_port()
    # The dead end, as issue 33 found it: the refusal replays at every restart, and no
    # decision on the step is taken.
    for said in ("not performed in 3 attempts", "Connection refused"):
        ended = mailer(store_url, provider, refusing)
        assert ended.returncode == oncelog.EXIT_HALTED, ended.stdout + ended.stderr
        assert "EffectRefused" in ended.stderr
        assert "oncelog retry m-a email --by NAME --why WHY" in ended.stderr
        assert said in ended.stderr
    assert performed(provider) == Counter(charge=1)
    refused = cli(store_url, "resolve", "m-a", "email", "not_done", "--by", "ops")
    assert refused.returncode == oncelog.ConflictError.exit_code
    with oncelog.open(store_url) as ledger:
        [charged, email] = ledger.steps("m-a")
        key = email.key
        assert email.state is oncelog.StepState.FAILED
        assert ledger.get_run("m-a").status is oncelog.RunStatus.FAILED
        said = "\n".join(ledger.what_next("m-a"))
    assert "oncelog retry m-a email --by NAME --why WHY" in said
    # The way out: one command, then the restart.
    retried = cli(store_url, "retry", "m-a", "email", "--by", "ops", "--why", "smtp is back")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert f"m-a email: not_done, a fresh set of attempts with the same key {key}" in retried.stdout
    assert "next: " in retried.stdout
    ended = mailer(store_url, provider, provider.url)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert performed(provider) == Counter(charge=1, send_email=1)  # the charge kept
    [sent] = [e for e in provider.effects("m-a") if e.payload["tool"] == "send_email"]
    assert sent.key == key
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok
        assert ledger.get_run("m-a").status is oncelog.RunStatus.COMPLETED
        [entry] = [e for e in ledger.journal("m-a") if e.event == "retried"]
        assert (entry.data["by"], entry.data["why"], entry.data["was"]) == (
            "ops", "smtp is back", "failed",
        )  # fmt: skip
        assert entry.data["attempts"] == 3
        assert ledger.steps("m-a")[0] == charged
    # A done effect is never performed again: refused, naming what fits.
    again = cli(store_url, "retry", "m-a", "email", "--by", "ops", "--why", "twice?")
    assert again.returncode == oncelog.NotRetryable.exit_code
    assert "never performs a done effect again" in again.stderr
    assert performed(provider) == Counter(charge=1, send_email=1)


def test_redrive_after_an_outage_takes_the_step_the_run_stopped_at(
    store_url: str, provider: Provider
) -> None:
    refusing = closed_port()
    assert mailer(store_url, provider, refusing).returncode == oncelog.EXIT_HALTED
    typo = cli(store_url, "redrive", "m-b", "--by", "ops", "--why", "outage over")
    assert typo.returncode == oncelog.UnknownRun.exit_code
    assert "did you mean 'm-a'" in typo.stderr
    charge = cli(store_url, "redrive", "m-a", "--from", "charge", "--by", "ops", "--why", "x")
    assert charge.returncode == oncelog.NotRetryable.exit_code
    assert "done" in charge.stderr
    driven = cli(store_url, "redrive", "m-a", "--by", "ops", "--why", "outage over")
    assert driven.returncode == 0, driven.stdout + driven.stderr
    assert "m-a email: not_done" in driven.stdout
    assert mailer(store_url, provider, provider.url).returncode == 0
    assert performed(provider) == Counter(charge=1, send_email=1)


def test_a_retry_is_refused_where_it_could_perform_an_effect_twice(
    ledger: oncelog.Ledger,
) -> None:
    @ledger.tool(kind="create", name="post")
    def post(*, idempotency_key: str) -> None:
        raise ConnectionResetError("the answer was lost")  # in doubt: maybe it happened

    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("post", post)
    with pytest.raises(oncelog.NotRetryable, match=r"in doubt.*oncelog resolve r post"):
        ledger.retry("r", "post", by="ops", why="try")
    ledger.resolve("r", "post", "abandon", by="ops")
    with pytest.raises(oncelog.NotRetryable, match=r"abandoned.*--correct"):
        ledger.retry("r", "post", by="ops", why="try")
    with pytest.raises(oncelog.UnknownStep, match="its steps: post"):
        ledger.retry("r", "pots", by="ops", why="try")
    with pytest.raises(oncelog.ConfigurationError, match="why"):
        ledger.retry("r", "post", by="ops", why="")
    assert ledger.verify().ok


def test_a_retry_is_refused_once_the_run_went_past_the_step(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="create", name="post", refusals=(PermissionError,))
    def post(*, idempotency_key: str) -> None:
        raise PermissionError("declined")

    @ledger.tool(kind="create", name="log")
    def log(*, idempotency_key: str) -> None:
        return None

    with ledger.run("r") as run:
        with contextlib.suppress(oncelog.EffectRefused):  # the agent's code goes on
            run.effect("post", post)
        run.effect("log", log)
    with pytest.raises(oncelog.NotRetryable, match="went on past"):
        ledger.retry("r", "post", by="ops", why="try")
    assert ledger.verify().ok


def test_the_console_lists_a_refused_run_and_retries_it(ledger: oncelog.Ledger) -> None:
    down = [True]

    @ledger.tool(kind="create", name="post", refusals=(PermissionError,))
    def post(*, idempotency_key: str) -> str:
        if down[0]:
            raise PermissionError("quota")
        return "posted"

    with pytest.raises(oncelog.EffectRefused), ledger.run("r-quota") as run:
        run.effect("post", post)
    with console_client(ledger) as person:
        assert "r-quota" in person.get("/").text  # the "needs a person" page lists it
        page = person.get("/runs/r-quota").text
        assert 'action="/steps/retry"' in page
        refused = person.post("/steps/retry", {"run_id": "r-quota", "step_id": "post", "by": "x"})
        assert refused.status_code == 400  # no why: nothing changed
        assert ledger.steps("r-quota")[0].state is oncelog.StepState.FAILED
        form = {"run_id": "r-quota", "step_id": "post", "by": "erin", "why": "quota raised"}
        assert person.post("/steps/retry", form).status_code == 303
        assert 'action="/steps/retry"' not in person.get("/runs/r-quota").text
    down[0] = False
    with ledger.run("r-quota") as run:
        assert run.effect("post", post) == "posted"
    [entry] = [e for e in ledger.journal("r-quota") if e.event == "retried"]
    assert entry.data["by"] == "erin"
    assert ledger.verify().ok
