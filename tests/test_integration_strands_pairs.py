"""The Strands guard meeting the other declarations a refund tool carries (issue 45): a
subject (``once_per``), a period (``once_for``), a probe, the kill switch while Strands
hands a tool's error to the model, an agent's budget. Each test runs the agent in
processes of its own (``strands_refund_agent``), one ledger for every session, and counts
the refunds at the provider process; each shows first what happens without the
declaration. Run in the Strands virtualenv (``.ci/strands test``)."""

from __future__ import annotations

from pathlib import Path

import oncelog
from oncelog import AgentBudget

from .integration_agents.processes import require_framework, run_agent
from .support.agents import AgentExit
from .support.provider_process import Provider

AGENT = "strands_refund_agent"


def refund(app: Path, provider: Provider, session: str, order: str, *options: str) -> AgentExit:
    """One process of the agent in folder ``app``, asked in ``session`` to refund ``order``."""
    app.mkdir(exist_ok=True)
    args = [
        "--ledger", str(app / "ledger.db"), "--provider", provider.url,
        "--model-calls", str(app / "model-calls"), "--flags", str(app / "flags"),
        "--session", session, "--order", order, *options,
    ]  # fmt: skip
    return run_agent(AGENT, *args)


def refunds(provider: Provider) -> int:
    """How many refunds the provider made: each request it answered is one."""
    return provider.total("refunds")


def model_calls(app: Path) -> int:
    return len((app / "model-calls").read_text().splitlines())


def receipt(answer: AgentExit) -> str:
    return answer.last_line.strip('"').split(": ")[-1]


def test_sessions_asking_to_refund_order_42_and_42_0_refund_once(
    tmp_path: Path, provider: Provider
) -> None:
    """Sessions are runs of their own: without a subject each refunds. With ``once_per``
    naming the order, a second session asking for 42 gets the first's receipt without a
    call; a third asking for 42.0 is the same subject, refunds nothing, and stops for a
    person (``ArgumentDrift``, exit 3): its arguments, as recorded, are not the first's."""
    require_framework("strands", "strands")
    plain, named = tmp_path / "plain", tmp_path / "named"
    for session, order in (("s1", "42"), ("s2", "42.0")):
        done = refund(plain, provider, session, order, "--guarded")
        assert done.returncode == 0, done
    assert refunds(provider) == 2  # the duplicate a subject exists for

    first = refund(named, provider, "s1", "42", "--guarded", "--subject")
    assert first.returncode == 0, first
    second = refund(named, provider, "s2", "42", "--guarded", "--subject")
    assert second.returncode == 0, second
    third = refund(named, provider, "s3", "42.0", "--guarded", "--subject")
    assert third.returncode == 3, third
    assert "ArgumentDrift" in third.stderr
    assert "refunds/s1/turn-1" in third.stderr
    assert refunds(provider) == 3
    assert receipt(first).startswith("fx_")
    assert receipt(second) == receipt(first)  # the first refund's receipt, no call


def test_the_same_prompt_as_the_next_turn_refunds_once(tmp_path: Path, provider: Provider) -> None:
    """The same prompt given again to the agent is its next turn, another run, whose model
    is asked live and asks for the refund again; the subject closes it."""
    require_framework("strands", "strands")
    plain, named = tmp_path / "plain", tmp_path / "named"
    done = refund(plain, provider, "s", "42", "--guarded", "--prompts", "2")
    assert done.returncode == 0, done
    assert refunds(provider) == 2

    done = refund(named, provider, "s", "42", "--guarded", "--subject", "--prompts", "2")
    assert done.returncode == 0, done
    assert refunds(provider) == 3
    with oncelog.open(str(named / "ledger.db")) as ledger:
        runs = sorted(r.run_id for r in ledger.runs())
    assert runs == ["refunds/s/turn-1", "refunds/s/turn-2"]


def test_a_kill_after_the_refund_is_settled_by_the_probe_for_both_sessions(
    tmp_path: Path, provider: Provider
) -> None:
    """Session 1 is SIGKILLed after the provider refunded, before the record. Session 2
    asking for order 42 meanwhile stops (``SubjectBusy``, exit 75: start again later)
    without a call; session 1 restarted settles it with its probe, without a second
    call; session 2 restarted gets that refund's receipt."""
    require_framework("strands", "strands")
    plain, named = tmp_path / "plain", tmp_path / "named"
    options = ["--guarded", "--probe", "--fault", "kill"]
    assert refund(plain, provider, "s1", "42", *options).killed
    assert refund(plain, provider, "s2", "42", *options).returncode == 0
    assert refunds(provider) == 2  # without the subject, session 2 refunds again

    options.append("--subject")
    killed = refund(named, provider, "s1", "42", *options)
    assert killed.killed, killed
    assert refunds(provider) == 3
    waits = refund(named, provider, "s2", "42", *options)
    assert waits.returncode == 75, waits
    assert "SubjectBusy" in waits.stderr
    settled = refund(named, provider, "s1", "42", *options)
    assert settled.returncode == 0, settled
    again = refund(named, provider, "s2", "42", *options)
    assert again.returncode == 0, again
    assert refunds(provider) == 3  # the probe found it: no second call, anywhere
    assert receipt(settled).startswith("fx_")
    assert receipt(again) == receipt(settled)
    with oncelog.open(str(named / "ledger.db")) as ledger:
        [step] = [s for s in ledger.steps("refunds/s1/turn-1") if s.step_id == "refund#1"]
    assert (step.state, step.attempts) == (oncelog.StepState.DONE, 1)


def test_each_period_refunds_once_and_its_probe_finds_its_own_refund(
    tmp_path: Path, provider: Provider
) -> None:
    """``once_for``: a done subject is free again after the period (a millisecond here,
    over by the next process). Without it, the second period's request gets the first
    period's receipt. With it, the second period refunds, is killed after the provider
    answered, and its probe finds its own refund (the period's own key), not the first."""
    require_framework("strands", "strands")
    forever, periods = tmp_path / "forever", tmp_path / "periods"
    assert refund(forever, provider, "s1", "42", "--guarded", "--subject").returncode == 0
    second = refund(forever, provider, "s2", "42", "--guarded", "--subject")
    assert second.returncode == 0, second
    assert refunds(provider) == 1

    options = ["--guarded", "--subject", "--probe", "--once-for", "0.001"]
    first = refund(periods, provider, "s1", "42", *options)
    assert first.returncode == 0, first
    killed = refund(periods, provider, "s2", "42", *options, "--fault", "kill")
    assert killed.killed, killed
    settled = refund(periods, provider, "s2", "42", *options, "--fault", "kill")
    assert settled.returncode == 0, settled
    made = provider.effects("refunds")[1:]
    assert len(made) == 2  # one per period
    assert receipt(first) == f"fx_{made[0].response['effect_id']}"
    assert receipt(settled) == f"fx_{made[1].response['effect_id']}"
    assert made[0].key != made[1].key


def test_a_halt_while_strands_hands_the_declined_refund_to_the_model_stops_the_retry(
    tmp_path: Path, provider: Provider
) -> None:
    """The provider declines (the policy's refusal): Strands hands the error to the model,
    which asks for the refund again. Meanwhile the on-call person turned the kill switch
    on. Plain Strands refunds on the model's second ask; guarded, the next step (the
    model's second call) raises ``RunHalted``: one request at the provider, exit 3, and
    every start stops there while the switch is on. Cleared, the turn goes on from that
    step, and refunds once."""
    require_framework("strands", "strands")
    plain, guarded = tmp_path / "plain", tmp_path / "guarded"
    done = refund(plain, provider, "s", "42", "--fault", "declined")
    assert done.returncode == 0, done
    assert refunds(provider) == 2

    for _ in range(2):
        stopped = refund(guarded, provider, "s", "42", "--guarded", "--fault", "declined")
        assert stopped.returncode == 3, stopped
        assert "RunHalted" in stopped.stderr
    assert refunds(provider) == 3
    assert model_calls(guarded) == 1  # nothing asked past the halt, nothing called
    with oncelog.open(str(guarded / "ledger.db")) as ledger:
        ledger.clear_halt(by="oncall")
    cleared = refund(guarded, provider, "s", "42", "--guarded", "--fault", "declined")
    assert cleared.returncode == 0, cleared
    assert "refunded order 42: fx_" in cleared.last_line
    assert refunds(provider) == 4
    with oncelog.open(str(guarded / "ledger.db")) as ledger:
        steps = [(s.step_id, s.state.value) for s in ledger.steps("refunds/s/turn-1")]
    assert steps == [
        ("model#1", "done"), ("refund#1", "failed"), ("model#2", "done"), ("refund#2", "done"),
        ("model#3", "done"),
    ]  # fmt: skip


def test_an_agents_budget_covers_its_sessions(tmp_path: Path, provider: Provider) -> None:
    """An agent's daily budget of one irreversible action: without ``agent=`` the guard's
    runs are nobody's and each session refunds; with it, the second session's refund
    is refused by the budget before the call (``BudgetExceeded``, exit 3)."""
    require_framework("strands", "strands")
    loose, scoped = tmp_path / "loose", tmp_path / "scoped"
    for app in (loose, scoped):
        app.mkdir()
        with oncelog.open(str(app / "ledger.db")) as ledger:
            ledger.set_agent_budget("refunder", AgentBudget(irreversible=1), by="ops")
    for session, order in (("s1", "41"), ("s2", "43")):
        assert refund(loose, provider, session, order, "--guarded").returncode == 0
    assert refunds(provider) == 2

    options = ["--guarded", "--agent", "refunder"]
    assert refund(scoped, provider, "s1", "41", *options).returncode == 0
    stopped = refund(scoped, provider, "s2", "43", *options)
    assert stopped.returncode == 3, stopped
    assert "BudgetExceeded" in stopped.stderr
    assert refunds(provider) == 3
