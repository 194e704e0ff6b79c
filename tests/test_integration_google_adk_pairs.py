"""Google ADK's guard meeting the other declarations a refund tool carries (issue 45): a
subject (``once_per``), a period (``once_for``), a probe, the kill switch while ADK hands
a tool's error to the model, an agent's budget. Each test runs the app in processes of its
own (``google_adk_refund_agent``), one ledger and one session database for every
session, and counts the refunds at the provider process; each shows first what happens
without the declaration."""

from __future__ import annotations

from pathlib import Path

import pytest

import oncelog
from oncelog import AgentBudget

from .integration_agents.processes import require_framework, run_agent
from .support.agents import AgentExit
from .support.provider_process import Provider

AGENT = "google_adk_refund_agent"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def refund(app: Path, provider: Provider, session: str, order: str, *options: str) -> AgentExit:
    """One process of the app in folder ``app``, asked in ``session`` to refund ``order``."""
    app.mkdir(exist_ok=True)
    args = [
        "--ledger", str(app / "ledger.db"), "--provider", provider.url,
        "--sessions", str(app / "sessions.db"), "--model-calls", str(app / "model-calls"),
        "--flags", str(app / "flags"), "--session", session, "--order", order, *options,
    ]  # fmt: skip
    return run_agent(AGENT, *args)


def refunds(provider: Provider) -> list[dict[str, object]]:
    """What the provider refunded, in order: each request it answered is a refund."""
    return [effect.payload for effect in provider.effects("refunds")]


def model_calls(app: Path) -> int:
    return len((app / "model-calls").read_text().splitlines())


def test_sessions_asking_to_refund_order_42_and_42_0_refund_once(
    tmp_path: Path, provider: Provider
) -> None:
    """Sessions are invocations, each its own run: without a subject each refunds. With
    ``once_per`` naming the order, a second session asking for 42 gets the first's
    receipt without a call; a third asking for 42.0 is the same subject, refunds nothing,
    and stops for a person (``ArgumentDrift``, exit 3): its arguments, as recorded, are not
    the first's, and a payment's drift is an error."""
    require_framework("google.adk", "google-adk")
    plain, named = tmp_path / "plain", tmp_path / "named"
    for session, order in (("s1", "42"), ("s2", "42.0")):
        done = refund(plain, provider, session, order, "--guarded")
        assert done.returncode == 0, done
    assert len(refunds(provider)) == 2  # the duplicate a subject exists for

    first = refund(named, provider, "s1", "42", "--guarded", "--subject")
    assert first.returncode == 0, first
    second = refund(named, provider, "s2", "42", "--guarded", "--subject")
    assert second.returncode == 0, second
    third = refund(named, provider, "s3", "42.0", "--guarded", "--subject")
    assert third.returncode == 3, third
    assert "ArgumentDrift" in third.stderr
    assert "refunds/ada/s1/" in third.stderr
    assert len(refunds(provider)) == 3
    receipt = first.last_line.split(": ")[-1]
    assert receipt.startswith("fx_")
    assert second.last_line == first.last_line  # the first refund's receipt, no call


def test_a_finished_turn_started_again_without_an_invocation_id_refunds_once(
    tmp_path: Path, provider: Provider
) -> None:
    """Without ``invocation_id=``, the same message after a finished turn (a process
    killed after the answer, restarted by its supervisor) is a new turn: ADK asks the
    model live, which asks for the refund again. The subject closes it."""
    require_framework("google.adk", "google-adk")
    plain, named = tmp_path / "plain", tmp_path / "named"
    for _ in range(2):
        done = refund(plain, provider, "s", "42", "--guarded")
        assert done.returncode == 0, done
    assert len(refunds(provider)) == 2  # the documented limit, without a subject
    with oncelog.open(str(plain / "ledger.db")) as ledger:
        assert len(ledger.runs()) == 2

    answers = [refund(named, provider, "s", "42", "--guarded", "--subject") for _ in range(2)]
    assert [a.returncode for a in answers] == [0, 0], answers
    assert answers[0].last_line == answers[1].last_line
    assert len(refunds(provider)) == 3
    assert model_calls(named) == 4  # the new turn's model was asked: live, as documented


def test_a_kill_after_the_refund_is_settled_by_the_probe_for_both_sessions(
    tmp_path: Path, provider: Provider
) -> None:
    """Session 1 is SIGKILLed after the provider refunded, before the record: the refund
    is in doubt in a run whose lease has not run out. Session 2 asking for order 42
    meanwhile stops (``SubjectBusy``, exit 75: start again later) without a call, and
    ADK's session keeps no error for it; session 1 restarted settles it with its probe,
    without a second call; session 2 restarted resumes its invocation, whose call gets
    that refund's receipt (it used to end without it: ADK's Resume took the kept error
    for the invocation's final answer)."""
    require_framework("google.adk", "google-adk")
    plain, named = tmp_path / "plain", tmp_path / "named"
    options = ["--guarded", "--probe", "--fault", "kill"]
    assert refund(plain, provider, "s1", "42", *options).killed
    assert refund(plain, provider, "s2", "42", *options).returncode == 0
    assert len(refunds(provider)) == 2  # without the subject, session 2 refunds again

    options.append("--subject")
    killed = refund(named, provider, "s1", "42", *options)
    assert killed.killed, killed
    assert len(refunds(provider)) == 3
    waits = refund(named, provider, "s2", "42", *options)
    assert waits.returncode == 75, waits  # start again later: the killed run's lease
    assert "SubjectBusy" in waits.stderr
    settled = refund(named, provider, "s1", "42", *options)
    assert settled.returncode == 0, settled
    again = refund(named, provider, "s2", "42", *options)
    assert again.returncode == 0, again
    assert len(refunds(provider)) == 3  # the probe found it: no second call, anywhere
    receipt = settled.last_line.split(": ")[-1]
    assert receipt.startswith("fx_")
    assert again.last_line.endswith(receipt)
    with oncelog.open(str(named / "ledger.db")) as ledger:
        [first] = [r for r in ledger.runs() if "/s1/" in r.run_id]
        [step] = [s for s in ledger.steps(first.run_id) if s.step_id == "refund#1"]
    assert (step.state, step.attempts) == (oncelog.StepState.DONE, 1)


def test_each_period_refunds_once_and_its_probe_finds_its_own_refund(
    tmp_path: Path, provider: Provider
) -> None:
    """``once_for``: a done subject is free again after the period (a millisecond here,
    over by the next process). Without it, the second period's request gets the first
    period's receipt. With it, the second period refunds, is killed after the provider
    answered, and its probe finds its own refund (the period's own key), not the first."""
    require_framework("google.adk", "google-adk")
    forever, periods = tmp_path / "forever", tmp_path / "periods"
    assert refund(forever, provider, "s1", "42", "--guarded", "--subject").returncode == 0
    second = refund(forever, provider, "s2", "42", "--guarded", "--subject")
    assert second.returncode == 0, second
    assert len(refunds(provider)) == 1

    options = ["--guarded", "--subject", "--probe", "--once-for", "0.001"]
    first = refund(periods, provider, "s1", "42", *options)
    assert first.returncode == 0, first
    killed = refund(periods, provider, "s2", "42", *options, "--fault", "kill")
    assert killed.killed, killed
    settled = refund(periods, provider, "s2", "42", *options, "--fault", "kill")
    assert settled.returncode == 0, settled
    made = provider.effects("refunds")[1:]
    assert len(made) == 2  # one per period
    assert first.last_line.endswith(f'fx_{made[0].response["effect_id"]}"')
    assert settled.last_line.endswith(f'fx_{made[1].response["effect_id"]}"')
    assert made[0].key != made[1].key


def test_a_halt_while_adk_hands_the_declined_refund_to_the_model_stops_the_retry(
    tmp_path: Path, provider: Provider
) -> None:
    """The provider declines (the policy's refusal): ADK hands the error to the model,
    which asks for the refund again. Meanwhile the on-call person turned the kill switch
    on. Plain ADK refunds on the model's second ask; guarded, the next step (the model's
    second call) raises ``RunHalted``: one request at the provider, exit 3, and every
    start stops there while the switch is on. Cleared, the invocation goes on from that
    step, and refunds once."""
    require_framework("google.adk", "google-adk")
    plain, guarded = tmp_path / "plain", tmp_path / "guarded"
    done = refund(plain, provider, "s", "42", "--fault", "declined", "--retry-plugin")
    assert done.returncode == 0, done
    assert len(refunds(provider)) == 2

    stopped = refund(
        guarded, provider, "s", "42", "--guarded", "--fault", "declined", "--retry-plugin"
    )
    assert stopped.returncode == 3, stopped
    assert "RunHalted" in stopped.stderr
    again = refund(
        guarded, provider, "s", "42", "--guarded", "--fault", "declined", "--retry-plugin"
    )
    assert again.returncode == 3, again
    assert len(refunds(provider)) == 3
    assert model_calls(guarded) == 1  # nothing asked past the halt, nothing called
    with oncelog.open(str(guarded / "ledger.db")) as ledger:
        ledger.clear_halt(by="oncall")
    cleared = refund(
        guarded, provider, "s", "42", "--guarded", "--fault", "declined", "--retry-plugin"
    )
    assert cleared.returncode == 0, cleared
    assert "refunded order 42: fx_" in cleared.last_line
    assert len(refunds(provider)) == 4
    with oncelog.open(str(guarded / "ledger.db")) as ledger:
        [run] = ledger.runs()
        steps = [(s.step_id, s.state.value) for s in ledger.steps(run.run_id)]
    assert steps == [
        ("model#1", "done"), ("refund#1", "failed"), ("model#2", "done"), ("refund#2", "done"),
        ("model#3", "done"),
    ]  # fmt: skip


def test_adks_node_retry_after_a_refund_in_doubt_calls_nothing_again(
    tmp_path: Path, provider: Provider
) -> None:
    """The agent declares ADK's own retry of a failed agent
    (``LlmAgent(retry_config=RetryConfig(max_attempts=3))``); the tool raises after the
    provider refunded, and the refund is in doubt (no probe). The stop sticks through
    each retry: met again before any step, nothing called, the model asked once, exit 3.
    A person records what the provider did; the restarted invocation replays to the step
    and answers with that receipt (it used to take another path than the recorded run:
    ADK's Resume had ended the invocation on the error it kept): one refund."""
    require_framework("google.adk", "google-adk")
    options = ["--guarded", "--fault", "raises", "--node-retries", "2"]
    stopped = refund(tmp_path, provider, "s", "42", *options)
    assert stopped.returncode == 3, stopped
    assert "AmbiguousOutcome: payment effect 'refund#1' raised ConnectionError" in stopped.stderr
    assert len(refunds(provider)) == 1
    assert model_calls(tmp_path) == 1
    [made] = provider.effects("refunds")
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        [run] = ledger.runs()
        assert [s.step_id for s in ledger.steps(run.run_id)] == ["model#1", "refund#1"]
        paid = {"receipt": f"fx_{made.response['effect_id']}"}
        ledger.resolve(run.run_id, "refund#1", "done", result=paid, by="ops")
    resumed = refund(tmp_path, provider, "s", "42", *options)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line == f'"refunded order 42: {paid["receipt"]}"'
    assert len(refunds(provider)) == 1


def test_an_invocation_whose_agent_adk_retried_after_a_model_error_replays_after_a_kill(
    tmp_path: Path, provider: Provider
) -> None:
    """The model's first call raises and ADK runs the agent again (``retry_config``); the
    retry asks the model, which asks for the refund, and the process is killed after the
    provider refunded. The attempt that raised took no step, so the restart replays the
    model's answer, its probe settles the refund, and the invocation ends: one refund; it
    used to stop on every restart (the retry one position on)."""
    require_framework("google.adk", "google-adk")
    options = ["--guarded", "--probe", "--model-fails", "--node-retries", "1", "--fault", "kill"]
    killed = refund(tmp_path, provider, "s", "42", *options)
    assert killed.killed, killed
    resumed = refund(tmp_path, provider, "s", "42", *options)
    assert resumed.returncode == 0, resumed
    [made] = provider.effects("refunds")
    receipt = made.response["effect_id"]
    assert resumed.last_line == f'"refunded order 42: fx_{receipt}"'
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        [run] = ledger.runs()
        steps = [(s.seq, s.step_id) for s in ledger.steps(run.run_id)]
    assert steps == [(0, "model#1"), (1, "refund#1"), (2, "model#2")]
    assert model_calls(tmp_path) == 2  # the replay asked nothing it had an answer to


def test_an_agents_budget_covers_its_sessions(tmp_path: Path, provider: Provider) -> None:
    """An agent's daily budget of one irreversible action: without ``agent=`` the guard's
    runs are nobody's and each session refunds; with it, the second session's refund
    is refused by the budget before the call (``BudgetExceeded``, exit 3)."""
    require_framework("google.adk", "google-adk")
    loose, scoped = tmp_path / "loose", tmp_path / "scoped"
    for app in (loose, scoped):
        app.mkdir()
        with oncelog.open(str(app / "ledger.db")) as ledger:
            ledger.set_agent_budget("refunder", AgentBudget(irreversible=1), by="ops")
    for session, order in (("s1", "41"), ("s2", "43")):
        assert refund(loose, provider, session, order, "--guarded").returncode == 0
    assert len(refunds(provider)) == 2

    options = ["--guarded", "--agent", "refunder"]
    assert refund(scoped, provider, "s1", "41", *options).returncode == 0
    stopped = refund(scoped, provider, "s2", "43", *options)
    assert stopped.returncode == 3, stopped
    assert "BudgetExceeded" in stopped.stderr
    assert len(refunds(provider)) == 3
