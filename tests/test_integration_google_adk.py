"""Google ADK, for real: an agent whose tools charge and email through the provider
process, with a scripted model and ADK's SQLite sessions, in processes of its own; the
effects are counted at the provider.

Plain ADK sends a second email in each of the ways issue 45 names: a process SIGKILLed
mid-tool and resumed (ADK's Resume: "at least once, and may run more than once"), a tool
error after the provider acted that ``ReflectAndRetryToolPlugin`` hands back to the model,
which calls the tool again; and its tool confirmation re-runs the invocation. Each test
shows the duplicate first, then the guarded app acting once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.processes import require_framework, run_agent
from .support.agents import AgentExit
from .support.provider_process import Provider

AGENT = "google_adk_agent"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def app(tmp_path: Path, provider: Provider, request: str, *options: str, **kw: Any) -> AgentExit:
    """One process of the app for ``request`` (its own ledger, sessions, flags)."""
    folder = tmp_path / request
    folder.mkdir(exist_ok=True)
    args = [
        "--ledger", str(folder / "ledger.db"), "--provider", provider.url,
        "--sessions", str(folder / "sessions.db"), "--model-calls", str(folder / "model-calls"),
        "--flags", str(folder / "flags"), "--request", request, *options,
    ]  # fmt: skip
    return run_agent(AGENT, *args, **kw)


def model_calls(tmp_path: Path, request: str) -> int:
    return len((tmp_path / request / "model-calls").read_text().splitlines())


def emails(provider: Provider, request: str) -> int:
    return sum(1 for e in provider.effects(request) if e.payload["tool"] == "send_email")


def charges(provider: Provider, request: str) -> int:
    return sum(1 for e in provider.effects(request) if e.payload["tool"] == "charge")


def test_plain_adk_resumed_after_a_kill_mid_tool_emails_twice_and_the_guarded_once(
    tmp_path: Path, provider: Provider
) -> None:
    require_framework("google.adk", "google-adk")
    plain = app(tmp_path, provider, "plain", "--fault", "kill")
    assert plain.killed, plain
    plain = app(tmp_path, provider, "plain", "--fault", "kill")
    assert plain.returncode == 0, plain
    assert emails(provider, "plain") == 2  # the duplicate: ADK's Resume ran the tool again

    guarded = app(tmp_path, provider, "guarded", "--fault", "kill", "--guarded", "--probe")
    assert guarded.killed, guarded
    guarded = app(tmp_path, provider, "guarded", "--fault", "kill", "--guarded", "--probe")
    assert guarded.returncode == 0, guarded
    assert "done: charge ok, send_email ok" in guarded.last_line
    assert (emails(provider, "guarded"), charges(provider, "guarded")) == (1, 1)
    assert model_calls(tmp_path, "guarded") == 2  # the resumed model call spent nothing
    with oncelog.open(str(tmp_path / "guarded" / "ledger.db")) as ledger:
        [run] = ledger.runs()
        assert run.run_id.startswith("billing/ada/guarded/e-")
        steps = [(s.step_id, s.state) for s in ledger.steps(run.run_id)]
    assert steps == [
        ("model#1", StepState.DONE), ("charge#1", StepState.DONE),
        ("send_email#1", StepState.DONE), ("model#2", StepState.DONE),
    ]  # fmt: skip


def test_a_tool_error_after_the_provider_acted_is_not_retried_by_adk(
    tmp_path: Path, provider: Provider
) -> None:
    """ReflectAndRetryToolPlugin hands the error to the model, which asks again: plain,
    two emails. Guarded with a probe: the email is found sent, the model sees its
    receipt. Guarded without one: the email is in doubt, a stop the plugin never sees;
    the process exits 3 and the model is not asked again."""
    require_framework("google.adk", "google-adk")
    options = ["--fault", "tool-raises", "--retry-plugin"]
    plain = app(tmp_path, provider, "plain", *options)
    assert plain.returncode == 0, plain
    assert emails(provider, "plain") == 2

    guarded = app(tmp_path, provider, "guarded", *options, "--guarded", "--probe")
    assert guarded.returncode == 0, guarded
    assert "send_email ok" in guarded.last_line
    assert emails(provider, "guarded") == 1

    stopped = app(tmp_path, provider, "stopped", *options, "--guarded")
    assert stopped.returncode == 3, stopped
    assert "AmbiguousOutcome" in stopped.stderr
    assert emails(provider, "stopped") == 1
    assert model_calls(tmp_path, "stopped") == 1
    again = app(tmp_path, provider, "stopped", *options, "--guarded")  # still stopped
    assert again.returncode == 3, again
    assert emails(provider, "stopped") == 1
    assert model_calls(tmp_path, "stopped") == 1


def test_a_confirmed_tool_runs_once_through_the_invocations_reruns(
    tmp_path: Path, provider: Provider
) -> None:
    """The email needs ADK's tool confirmation; the charge runs in the first leg. The
    person's answer continues the invocation, which ADK runs again; a process killed
    after the email and resumed runs it again once more. Plain: the charge or the email
    twice. Guarded: each once, the email under an oncelog approval of its arguments."""
    require_framework("google.adk", "google-adk")
    for request, guard in (("plain", []), ("guarded", ["--guarded", "--probe"])):
        asked = app(tmp_path, provider, request, "--confirm", "ask", *guard)
        assert asked.returncode == 0, asked
        assert asked.last_line == '"paused"'
        assert emails(provider, request) == 0
        answered = app(tmp_path, provider, request, "--confirm", "yes", "--fault", "kill", *guard)
        assert answered.killed, answered
        resumed = app(tmp_path, provider, request, "--confirm", "yes", *guard)
        assert resumed.returncode == 0, resumed
    assert emails(provider, "plain") + charges(provider, "plain") > 2  # the duplicate
    assert (emails(provider, "guarded"), charges(provider, "guarded")) == (1, 1)
    with oncelog.open(str(tmp_path / "guarded" / "ledger.db")) as ledger:
        [run] = ledger.runs()
        [approval] = ledger.approvals(None)
        assert (approval.step_id, approval.status.value) == ("send_email#1", "used")
        assert approval.decided_by == "google-adk confirmation"
        assert ledger.get_run(run.run_id).status is oncelog.RunStatus.COMPLETED
