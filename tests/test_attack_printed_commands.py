"""Attack: a run id chosen by whoever starts a run is pasted into a shell by the operator
who runs the command oncelog printed for it. The printed command must reach oncelog with
the exact id, whatever it holds, and run nothing else. The agent runs in its own process;
what reached the provider is read from the tool's tries file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import oncelog
from oncelog._commands import oncelog_command, option, quoted

from .support.flaky_agent import flaky, tries_made

RUN_IDS = ["x;touch F;y", "-rf", "a'b\"c", "$(touch F)", "line\nbreak;touch F", "--help"]


def _pasted(command: str, store_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run by bash, as an operator pasting it would, with this ``oncelog``."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "ONCELOG_URL": store_url}
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def _printed(out: str, verb: str) -> str:
    """The command ending the error ``run_main`` printed (before its ``run:`` line), as
    the operator copies it, with their name for ``NAME``."""
    start = out.rindex(f"oncelog {verb}")
    return out[start : out.index("\n  run: ", start)].replace("--by NAME", "--by alice")


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_the_printed_approve_command_approves_exactly_that_run(
    store_url: str, tmp_path: Path, run_id: str
) -> None:
    tries = tmp_path / "tries"
    env = {"ONCELOG_RUN_ID": run_id}
    code, out = flaky(store_url, tries, "--approval", "--run-id-from-env", **env)
    assert code == oncelog.EXIT_WAITING, out
    pasted = _pasted(_printed(out, "approve"), store_url, tmp_path)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert not (tmp_path / "F").exists()
    with oncelog.open(store_url, create=False) as ledger:
        [approval] = ledger.approvals(None)
    assert (approval.run_id, approval.status) == (run_id, oncelog.ApprovalStatus.APPROVED)
    code, out = flaky(store_url, tries, "--approval", "--run-id-from-env", **env)
    assert code == 0, out
    assert len(tries_made(tries)) == 1


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_the_printed_resume_command_clears_exactly_that_runs_switch(
    store_url: str, tmp_path: Path, run_id: str
) -> None:
    tries = tmp_path / "tries"
    env = {"ONCELOG_RUN_ID": run_id}
    with oncelog.open(store_url) as ledger:
        ledger.halt("looking", by="ops", run=run_id, ahead=True)  # before its first start
    code, out = flaky(store_url, tries, "--run-id-from-env", **env)
    assert code == oncelog.EXIT_HALTED, out
    pasted = _pasted(_printed(out, "resume"), store_url, tmp_path)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert not (tmp_path / "F").exists()
    code, out = flaky(store_url, tries, "--run-id-from-env", **env)
    assert code == 0, out
    assert len(tries_made(tries)) == 1


# -- a decision printed in an error message, pasted as it is ------------------------------


def _decision(message: str, then: str) -> str:
    """The ``then`` command of the decisions a message lists, with their name for NAME."""
    start = message.index("oncelog resolve ")
    commands = message[start:].split("; ")
    [command] = [c for c in commands if c.split()[4] == then]
    return command.rpartition(" (")[0].replace("--by NAME", "--by alice")


def test_the_printed_decision_on_a_subject_in_doubt_names_the_holders_attempt(
    store_url: str, tmp_path: Path
) -> None:
    """Run a's charge of order o-1 is in doubt at its second attempt; run b's charge of the
    same order stops with SubjectInDoubt, whose printed command decides a's attempt 2 (it
    named none, and was refused once a's step had a second attempt)."""
    sent: list[str] = []
    with oncelog.open(store_url) as ledger:

        @ledger.tool(kind="create", name="charge", once_per=lambda order: ("charge", order))
        def charge(order: str, *, idempotency_key: str) -> None:
            sent.append(order)
            raise ConnectionError("no answer")

        for _ in range(2):
            with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("a") as run:
                run.effect("charge", charge, "o-1")
            if len(sent) == 1:
                ledger.resolve("a", "charge", "not_done", by="ops", attempt=1)
        with pytest.raises(oncelog.SubjectInDoubt) as stopped, ledger.run("b") as run:
            run.effect("charge", charge, "o-1")
    pasted = _pasted(_decision(str(stopped.value), "abandon"), store_url, tmp_path)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    with oncelog.open(store_url, create=False) as ledger:
        [step] = ledger.steps("a")
    assert (step.state, step.attempts) == (oncelog.StepState.ABANDONED, 2)
    assert sent == ["o-1", "o-1"]


def test_the_printed_done_decision_is_accepted_for_a_tool_with_a_result_schema(
    store_url: str, tmp_path: Path
) -> None:
    """The printed ``done`` is accepted for a tool whose result schema ``{}`` would fail."""
    schema = {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}
    with oncelog.open(store_url) as ledger:

        @ledger.tool(kind="create", name="ticket", result_schema=schema)
        def ticket(*, idempotency_key: str) -> dict[str, str]:
            raise ConnectionError("no answer")

        with pytest.raises(oncelog.AmbiguousOutcome) as stopped, ledger.run("r") as run:
            run.effect("ticket", ticket)
    pasted = _pasted(_decision(str(stopped.value), "done"), store_url, tmp_path)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    with oncelog.open(store_url, create=False) as ledger, ledger.run("r") as run:
        got: object = run.effect("ticket", ticket)
    assert got is oncelog.NO_RESULT


# -- the quoting itself (in process), every word through bash ----------------------------

WORDS = [*RUN_IDS, "plain-id", "é€😀", "tab\there", "\x1b[31mred", "admin\u202egpj", "\x9b", "\\'"]


@pytest.mark.parametrize("word", WORDS)
def test_a_quoted_word_is_that_word_to_bash_and_shows_on_one_line(word: str) -> None:
    printed = quoted(word)
    assert printed.isprintable()
    echoed = subprocess.run(
        ["bash", "-c", f"printf %s {printed}"], capture_output=True, timeout=10, check=True
    )
    assert echoed.stdout.decode() == word


def test_a_command_puts_ids_with_a_leading_dash_after_its_options() -> None:
    assert oncelog_command("approve", ["-rf", "s"], options="--by NAME") == (
        "oncelog approve --by NAME -- -rf s"
    )
    assert oncelog_command("show", ["r 1"]) == "oncelog show 'r 1'"
    assert option("--run", "-rf") == "--run=-rf"
