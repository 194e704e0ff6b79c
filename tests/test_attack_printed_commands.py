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
