"""The on-call path without gaps (issue 43, items 1 and 3), under a supervisor that does
with exit codes what ``examples/kubernetes/job.yaml`` declares (``support/job_supervisor``):
real agent processes, a webhook receiver that keeps every notice, and the provider side's
own record of what was performed.

A run blocked by another run's effect in doubt, whose process is gone (a hold, a LangGraph
thread whose tool node was killed and a message sent again instead of resuming it), is a
person's: it exits 3, which ends the Job, and a person is told once, however often it is
started again, with the blocking effect's decisions; the command the notice names, pasted,
lets the next start complete, the effect performed once. An effect whose retries ran out
exits 3 too, its notice naming ``oncelog retry``; pasted, the Job created again completes.
"""

from __future__ import annotations

import re
import shlex
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

import oncelog

from .hold_agents import fenced_resource
from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import require_framework, run_agent
from .support.job_supervisor import Job
from .support.launch import environment, python, run_python
from .support.provider_process import Provider, running_provider
from .support.receiver import Receiver, receiving

HOLD_AGENTS = Path(__file__).with_name("hold_agents")
CONTENDER = HOLD_AGENTS / "contender.py"
MAILER = Path(__file__).parent / "retry_agents" / "mailer.py"
REFUNDER = Path(__file__).parent / "subject_agents" / "refunder.py"
CONSOLE = "http://console.example:8080"
SECRET = "a-link-secret-of-enough-characters-for-the-test"
# What a supervisor that ignores exit codes does (a queue redelivering, a loop in a shell).
RESTARTS = 4
Ended = subprocess.CompletedProcess[str]
RESOLVE_DONE = re.compile(r"oncelog resolve \S+ \S+ done --no-result --by NAME --attempt \d+")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


@pytest.fixture
def paged(receiver: Receiver) -> dict[str, str]:
    """The environment of an agent that tells a person through ``receiver``, with links."""
    return {
        "ONCELOG_ALERT_WEBHOOK": receiver.url, "ONCELOG_CONSOLE_URL": CONSOLE,
        "ONCELOG_LINK_SECRET": SECRET,
    }  # fmt: skip


def job() -> Job:
    return replace(Job.example(), deadline=8)


def paste(command: str, store_url: str, **filled: str) -> subprocess.CompletedProcess[str]:
    """A person's paste of a printed command, its placeholders filled in."""
    for placeholder, value in filled.items():
        command = command.replace(placeholder, shlex.quote(value))
    argv = shlex.split(command)
    assert argv[0] == "oncelog", command
    return run_python("-m", "oncelog", *argv[1:], "--db", store_url)


def links(notice: dict[str, object]) -> dict[str, str]:
    """The notice's signed decision links, by decision."""
    found = notice["links"]
    assert isinstance(found, dict), notice
    return {str(k): str(v) for k, v in found.items()}


def closed_port() -> str:
    """The address of a port nobody listens on: every connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def contender(store_url: str, run_id: str, log: Path, env: dict[str, str], *extra: str) -> int:
    argv = python(CONTENDER, store_url, run_id, log, "--holds", "1", "--wait", "0", *extra)
    ended = subprocess.run(argv, env=environment(**env), capture_output=True, timeout=60)
    return ended.returncode


def blocked(store_url: str) -> None:
    """Return once the dead holder's lease has lapsed by the store's clock."""
    deadline = time.monotonic() + 30
    with oncelog.open(store_url) as ledger:
        while [h.state for h in ledger.holds()] != ["blocked"]:
            assert time.monotonic() < deadline, ledger.holds()
            time.sleep(0.05)


def test_a_run_blocked_by_a_dead_holders_effect_in_doubt_pages_once_and_ends_the_job(
    store_url: str, tmp_path: Path, receiver: Receiver, paged: dict[str, str]
) -> None:
    log = tmp_path / "resource.log"
    dies = ("--lease-ttl", "0.5", "--kind", "create", "--die-in-tool")
    assert contender(store_url, "dies", log, paged, *dies) == -signal.SIGKILL
    blocked(store_url)

    ended, codes = job().run(lambda: contender(store_url, "second", log, paged))
    assert (ended, codes) == ("failed", [oncelog.EXIT_HALTED])  # not 75 until the deadline
    for _ in range(RESTARTS):
        assert contender(store_url, "second", log, paged) == oncelog.EXIT_HALTED
    [notice] = receiver.bodies
    assert (notice["error"], notice["kind"], notice["blocked_run"]) == (
        "HoldInDoubt", "halted", "second",
    )  # fmt: skip
    # The blocking effect's decision, not one of the blocked run's own.
    assert (notice["run_id"], notice["step_id"], notice["attempt"]) == ("dies", "first-0", 1)
    assert notice["id"] == "unknown:dies:first-0:1"
    assert sorted(links(notice)) == ["abandon", "done", "not_done"]
    assert all(url.startswith(f"{CONSOLE}/link/") for url in links(notice).values())
    [command] = RESOLVE_DONE.findall(str(notice["message"]))
    assert command.startswith("oncelog resolve dies first-0 done")

    decided = paste(command, store_url, NAME="ann")
    assert decided.returncode == 0, decided.stdout + decided.stderr
    ended, codes = job().run(lambda: contender(store_url, "second", log, paged))
    assert (ended, codes) == ("succeeded", [0])
    assert len(receiver.bodies) == 1
    actions = fenced_resource.lines(log)
    assert [int(e[1]) for e in actions if e[0] == "begin"] == [1, 2, 2]  # dies once, second twice
    assert not [e for e in actions if e[0] == "violation"]


def test_runs_blocked_by_a_subject_in_doubt_page_once_with_the_holders_decisions(
    store_url: str, tmp_path: Path, receiver: Receiver, paged: dict[str, str]
) -> None:
    """Run ``a`` is killed after its refund's intent and halts on it (paged once). Runs
    ``b`` and ``c``, refunding the same order, are blocked by it: each start exits 3 and
    pages nobody again, as the decision is ``a``'s. The pasted ``not_done`` lets ``b``
    refund and ``c`` take its result: one refund."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:

        def start(run_id: str, *options: str, crash_at: str | None = None) -> Ended:
            argv = [store_url, run_id, provider.url, "7", *options]
            return run_python(REFUNDER, *argv, env=environment(crash_at, **paged))

        def refund(run_id: str, *options: str, crash_at: str | None = None) -> int:
            return start(run_id, *options, crash_at=crash_at).returncode

        assert refund("a", crash_at="after_intent_commit@refund") == -signal.SIGKILL
        assert refund("a", "--no-probe") == oncelog.EXIT_HALTED
        for blocked_run in ("b", "c"):
            assert job().run(partial(refund, blocked_run)) == ("failed", [oncelog.EXIT_HALTED])
            for _ in range(RESTARTS):
                assert refund(blocked_run) == oncelog.EXIT_HALTED
        [notice] = receiver.bodies  # a's own halt: the one decision
        assert (notice["id"], notice["run_id"], notice["step_id"]) == (
            "unknown:a:refund:1", "a", "refund",
        )  # fmt: skip
        assert sorted(links(notice)) == ["abandon", "done", "not_done"]
        said = start("b")
        assert "SubjectInDoubt" in said.stderr
        [command] = re.findall(
            r"oncelog resolve a refund not_done --by NAME --attempt 1", said.stderr
        )

        decided = paste(command, store_url, NAME="ops")  # the provider shows no refund
        assert decided.returncode == 0, decided.stdout + decided.stderr
        assert job().run(lambda: refund("b")) == ("succeeded", [0])
        assert job().run(lambda: refund("c")) == ("succeeded", [0])
        assert len(provider.effects("b")) == 1
        assert provider.effects("a") == provider.effects("c") == []
    assert len(receiver.bodies) == 1


def test_a_langgraph_message_sent_again_after_a_kill_mid_tool_pages_once(
    tmp_path: Path, receiver: Receiver, paged: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43's first gap: the message sent again on a thread whose tool node was killed
    after its email went out, again and again by a supervisor, looped on exit 75 in
    silence. It ends the Job with 3; one notice carries the email's decisions; the pasted
    ``done`` lets the next send complete, the email performed once."""
    require_framework("langgraph", "langgraph")
    for name, value in paged.items():
        monkeypatch.setenv(name, value)
    ledger_url = str(tmp_path / "ledger.db")
    args = [
        "--ledger", ledger_url, "--effects", str(tmp_path / "effects.jsonl"),
        "--model-calls", str(tmp_path / "model-calls"), "--thread", "chat-7",
        "--checkpoints", str(tmp_path / "checkpoints.db"), "--once-per", "--lease-ttl", "1",
    ]  # fmt: skip

    def effects() -> Counter[str]:
        return Counter(e["tool"] for e in EffectLog(tmp_path / "effects.jsonl").entries())

    killed = run_agent("langgraph_agent", *args, crash_at="after_call@send_email#1")
    assert killed.killed, killed
    assert effects() == {"send_email": 1}

    def resend() -> int:
        return run_agent("langgraph_agent", *args, "--resend").returncode

    # Until the killed node's lease lapses, a live process may still hold it: 75, as it
    # should be. Once it has, only a person moves the thread.
    blocked(ledger_url)
    ended, codes = job().run(resend)
    assert (ended, codes) == ("failed", [oncelog.EXIT_HALTED])
    for _ in range(RESTARTS):
        assert resend() == oncelog.EXIT_HALTED
    [notice] = receiver.bodies
    assert notice["error"] == "HoldInDoubt"
    assert str(notice["run_id"]).startswith("billing/chat-7/tools@2/")
    assert str(notice["blocked_run"]).startswith("billing/chat-7/")
    assert (notice["step_id"], notice["tool"]) == ("send_email#1", "send_email")
    assert sorted(links(notice)) == ["abandon", "done", "not_done"]
    assert "resume_config" in str(notice["message"])
    [command] = RESOLVE_DONE.findall(str(notice["message"]))

    decided = paste(command, ledger_url, NAME="ann")
    assert decided.returncode == 0, decided.stdout + decided.stderr
    ended, codes = job().run(resend)
    assert (ended, codes) == ("succeeded", [0])
    assert effects() == {"send_email": 1, "charge": 1}  # the email found by its subject
    assert len(receiver.bodies) == 1


def test_an_effect_whose_retries_ran_out_ends_the_job_and_its_notice_names_the_retry(
    store_url: str, provider: Provider, receiver: Receiver, paged: dict[str, str]
) -> None:
    """Issue 43's third gap: out of retries, the agent exited 1, which the Job counts
    against ``backoffLimit`` (three more pods, each exiting 1, then a failed Job), and the
    notice named no command. It exits 3, one pod; the notice names ``oncelog retry``;
    pasted, the Job created again completes, the email sent once."""

    def pod(email_service: str) -> int:
        argv = (MAILER, store_url, "m-a", provider.url, email_service)
        return run_python(*argv, env=environment(**paged)).returncode

    refusing = closed_port()
    ended, codes = job().run(lambda: pod(refusing))
    assert (ended, codes) == ("failed", [oncelog.EXIT_HALTED])
    [notice] = receiver.bodies
    assert (notice["error"], notice["kind"], notice["step_id"]) == (
        "EffectRefused", "failed", "email",
    )  # fmt: skip
    assert sorted(links(notice)) == ["retry"]
    [command] = re.findall(r"oncelog retry m-a email --by NAME --why WHY", str(notice["message"]))

    retried = paste(command, store_url, NAME="ops", WHY="the mail service is back")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    ended, codes = job().run(lambda: pod(provider.url))  # the Job created again
    assert (ended, codes) == ("succeeded", [0])
    performed = Counter(e.payload["tool"] for e in provider.effects("m-a"))
    assert performed == Counter(charge=1, send_email=1)
