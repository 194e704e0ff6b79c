"""What a person reads right after a SIGKILL, and what every command printed for them does
when pasted into a shell as it is (with their name for NAME): ``oncelog unknown`` tells a
dead owner from a live one, each ``decide:`` command is accepted, and the ``next:`` line
after a decision names the restart. The agent is a real process killed with SIGKILL; what
reached the provider is read from its tool's tries file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import oncelog

from .support.flaky_agent import FLAKY, flaky, tries_made
from .support.launch import environment

DECISIONS = ("done", "not_done", "abandon")


def pasted(command: str, store_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run by bash as an operator pastes it, NAME replaced by their name."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "ONCELOG_URL": store_url}
    return subprocess.run(
        ["bash", "-c", command.replace("--by NAME", "--by alice")],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def unknown(store_url: str, cwd: Path) -> str:
    done = pasted("oncelog unknown", store_url, cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def decide_lines(shown: str) -> list[str]:
    """The commands under ``decide:``, as printed."""
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("decide:"))
    first = lines[start].split("decide:", 1)[1].strip()
    rest = [line.strip() for line in lines[start + 1 : start + len(DECISIONS)]]
    return [first, *rest]


def killed_after_the_call(store_url: str, tries: Path) -> None:
    code, out = flaky(store_url, tries, "--kind", "create", crash_at="after_call")
    assert code == -signal.SIGKILL, out
    assert len(tries_made(tries)) == 1


@pytest.mark.parametrize("decision", DECISIONS)
def test_each_printed_decision_pastes_as_it_is_and_next_names_the_restart(
    store_url: str, tmp_path: Path, decision: str
) -> None:
    tries = tmp_path / "tries"
    killed_after_the_call(store_url, tries)
    shown = unknown(store_url, tmp_path)
    assert ("orphaned" in shown, "(pid " in shown) == (True, True), shown  # no lease wait
    assert "may still be running" not in shown
    lines = decide_lines(shown)
    assert [line.split()[4] for line in lines] == list(DECISIONS), shown
    [line] = [line for line in lines if line.split()[4] == decision]
    done = pasted(line, store_url, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "next: no process holds the run: restart its agent with run id r;" in done.stdout
    assert "a person must act" not in done.stdout
    code, out = flaky(store_url, tries, "--kind", "create")  # the restart it names
    made = tries_made(tries)
    if decision == "not_done":  # sent again, with the same key
        assert (code, len(made), made[0].key == made[1].key) == (0, 2, True), out
    elif decision == "done":
        assert (code, len(made)) == (0, 1), out
    else:
        assert len(made) == 1, out
    with oncelog.open(store_url, create=False) as ledger:
        assert ledger.effects_in_doubt() == []


def test_a_live_owner_is_told_apart_from_a_dead_one(store_url: str, tmp_path: Path) -> None:
    tries, hold = tmp_path / "tries", tmp_path / "hold"
    args = [str(FLAKY), store_url, "r", str(tries), "--kind", "create", "--hold", str(hold)]
    agent = subprocess.Popen([sys.executable, *args], env=environment(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not tries_made(tries):
            assert (time.monotonic() < deadline, agent.poll()) == (True, None)
            time.sleep(0.05)
        shown = unknown(store_url, tmp_path)
        assert (" in_flight " in shown, "a live process" in shown) == (True, True), shown
        assert f"pid {agent.pid} on " in shown
        decided = pasted(decide_lines(shown)[1], store_url, tmp_path)  # not_done
        assert decided.returncode == oncelog.RunLeased.exit_code, decided.stdout
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=60)
        shown = unknown(store_url, tmp_path)
        assert (" orphaned " in shown, "is gone" in shown) == (True, True), shown
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=60)


CLERK = Path(__file__).parent / "wait_agents" / "clerk.py"


def clerk(
    store_url: str, markers: Path, *options: str, crash: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of the clerk agent on run ``r1``: two emails."""
    env = environment(crash)
    return [sys.executable, str(CLERK), store_url, "r1", str(markers), "2", *options], env


def test_an_agent_waiting_in_place_is_named_and_goes_on_by_itself(
    db_path: str, tmp_path: Path
) -> None:
    markers = tmp_path / "keys"
    argv, env = clerk(db_path, markers, crash="after_call@send-1")
    assert subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode == -9
    argv, env = clerk(db_path, markers, "--wait", "120", "--poll", "0.2")
    agent = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        with oncelog.open(db_path, create=False) as ledger:
            while ledger.waiting_in_place("r1") is None:
                assert (time.monotonic() < deadline, agent.poll()) == (True, None)
                time.sleep(0.05)
            waiter = ledger.waiting_in_place("r1")
            assert waiter is not None
            assert f"pid {agent.pid} on " in waiter.described()
            [first, *commands] = ledger.what_next("r1")
        assert "the agent waiting in place for a decision (pid " in first
        assert "goes on by itself once it is decided" in first
        assert any(c.startswith("oncelog resolve r1 send-1 ") for c in commands)
        shown = unknown(db_path, tmp_path)
        done = pasted(decide_lines(shown)[0], db_path, tmp_path)  # done, --no-result
        assert done.returncode == 0, done.stdout + done.stderr
        said = done.stdout.split("next: ", 1)[1]
        assert "goes on by itself" in said or "completed" in said, said
        assert "restart its agent" not in said, said
        _, stderr = agent.communicate(timeout=60)
        assert agent.returncode == 0, stderr
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate(timeout=60)
    assert len(markers.read_text().splitlines()) == 2  # send-1 was not sent again
    with oncelog.open(db_path, create=False) as ledger:
        assert ledger.waiting_in_place("r1") is None  # it took the run up


RESENT = {
    None: "restart its agent with run id task-7f3a; recorded steps replay",
    "celery": "send the Celery task again with the same task id, "
    "TASK.apply_async(ARGS, task_id='task-7f3a')",
    "temporal": "the Temporal workflow schedules the activity again",
    "dbos": "DBOS.delete_workflow('task-7f3a'), then start the workflow again",
    "langgraph:ticket-9": "invoke the LangGraph graph again on thread ticket-9: graph.invoke("
    "None, {'configurable': {'thread_id': 'ticket-9'}})",
    "mcp": "the MCP client calls its tool again through the proxy",
    "gateway": "the MCP client calls its tool again through the gateway (oncelog gateway) in "
    "run task-7f3a, with the same call id",
}


@pytest.mark.parametrize("origin", list(RESENT))
def test_a_halted_run_decided_names_the_one_way_its_origin_starts_it_again(
    ledger: oncelog.Ledger, origin: str | None
) -> None:
    """Whatever started the run (its integration records it) is the one way named: not
    every engine's, the same four lines for every run."""

    @ledger.tool(kind="create", name="send")
    def send(*, idempotency_key: str) -> None:
        raise ConnectionResetError("the answer was lost")

    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("task-7f3a", origin=origin) as run:
        run.effect("mail", send)
    ledger.resolve("task-7f3a", "mail", "done", by="alice", result={"id": "m1"})
    [line] = ledger.what_next("task-7f3a")
    assert line.startswith(f"the run task-7f3a is queued: {RESENT[origin]}"), line
    assert ("Celery" in line, "Temporal" in line, "DBOS" in line) == (
        origin == "celery", origin == "temporal", origin == "dbos"
    )  # fmt: skip


def test_a_submitted_run_decided_names_the_worker_to_start(ledger: oncelog.Ledger) -> None:
    ledger.submit("q-1", {"ticket": 7}, agent="support")
    ledger.halt("look first", by="ops", run="q-1")
    ledger.clear_halt(by="ops", run="q-1")
    [line] = ledger.what_next("q-1")
    assert "oncelog worker MODULE:HANDLER --agent support" in line


@pytest.mark.parametrize("run_id", ["x;touch F;y", "-rf", "$(touch F)", "line\nbreak;touch F"])
def test_a_decide_line_decides_exactly_that_run_whatever_its_id(
    store_url: str, tmp_path: Path, run_id: str
) -> None:
    tries = tmp_path / "tries"
    env = {"ONCELOG_RUN_ID": run_id}
    code, out = flaky(store_url, tries, "--kind", "create", "--run-id-from-env",
                      crash_at="after_call", **env)  # fmt: skip
    assert code == -signal.SIGKILL, out
    [line] = [d for d in decide_lines(unknown(store_url, tmp_path)) if " not_done " in d]
    done = pasted(line, store_url, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "F").exists()
    with oncelog.open(store_url, create=False) as ledger:
        [step] = ledger.steps(run_id)
    assert step.state is oncelog.StepState.NOT_DONE, step
