"""The CLI through click's runner, against a real ledger."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli

from .support.launch import python


@pytest.fixture
def halted_run(db_path: str) -> str:
    with oncelog.open(db_path) as ledger:

        @ledger.tool(kind="create", name="send")
        def send(*, idempotency_key: str) -> None:
            raise ConnectionError("no answer")

        with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r1") as run:
            run.effect("mail", send)
    return db_path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_runs_show_unknown_resolve(halted_run: str) -> None:
    code, out = invoke("runs", "--db", halted_run)
    assert code == 0
    assert "r1" in out
    assert "halted" in out
    code, out = invoke("unknown", "--db", halted_run, "--json")
    assert code == 0
    [step] = json.loads(out)
    assert (step["run_id"], step["step_id"], step["state"]) == ("r1", "mail", "unknown")
    code, out = invoke(
        "resolve",
        "r1",
        "mail",
        "done",
        "--by",
        "alice",
        "--result",
        '{"id": 7}',
        "--db",
        halted_run,
    )
    assert code == 0, out
    code, out = invoke("show", "r1", "--db", halted_run)
    assert code == 0
    assert "done" in out
    assert '{"id":7}' in out
    with oncelog.open(halted_run) as ledger:
        assert ledger.get_run("r1").status is oncelog.RunStatus.QUEUED  # ready to resume
        assert ledger.steps("r1")[0].result == {"id": 7}


def test_errors_are_messages_with_exit_codes(halted_run: str, tmp_path: Path) -> None:
    code, out = invoke("show", "nope", "--db", halted_run)
    assert code == 5  # not found, without click's usage banner
    assert "no run named 'nope'" in out
    assert "Usage:" not in out
    code, out = invoke(
        "resolve", "r1", "mail", "done", "--by", "a", "--result", "{", "--db", halted_run
    )
    assert code == 2
    assert "not JSON" in out
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    code, out = invoke("runs", "--db", str(garbage))
    assert code == 1
    assert "CorruptRecord" in out


DEEP = "[" * 60_000 + "]" * 60_000  # Python's JSON decoder recurses per level


@pytest.mark.parametrize(
    ("command", "exit_code"),
    [
        (["resolve", "r1", "mail", "done", "--by", "a", "--result", DEEP], 2),
        (["submit", "r2", "--input", DEEP], 2),
        (["release", DEEP, "--by", "a", "--why", "w"], 2),  # a plain name, too long
    ],
    ids=["resolve --result", "submit --input", "release RESOURCE"],
)
def test_json_nested_too_deeply_is_a_usage_error_not_a_traceback(
    halted_run: str, command: list[str], exit_code: int
) -> None:
    result = CliRunner().invoke(cli, [*command, "--db", halted_run])
    assert not isinstance(result.exception, RecursionError), result.exception
    assert result.exit_code == exit_code, result.output[-500:]
    with oncelog.open(halted_run) as ledger:
        [step] = ledger.steps("r1")
        assert step.state is oncelog.StepState.UNKNOWN
        assert [r.run_id for r in ledger.runs()] == ["r1"]


def test_db_from_environment(halted_run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCELOG_URL", f"sqlite:///{halted_run}")
    code, out = invoke("runs", "--json")
    assert code == 0
    assert json.loads(out)[0]["run_id"] == "r1"


def test_budgets_shows_and_a_person_raises_them(db_path: str) -> None:
    budget = oncelog.Budget(steps=1, on_exceed="pause")
    with oncelog.open(db_path) as ledger, ledger.run("b1", budget=budget) as run:
        run.read("q", lambda: 1)
    code, out = invoke("budgets", "b1", "--db", db_path)
    assert code == 0
    assert "steps         used          1   limit 1" in out
    code, out = invoke("budgets", "b1", "--set", "steps=5", "--db", db_path)
    assert code == 2
    assert "--by" in out
    code, out = invoke(
        "budgets",
        "b1",
        "--set",
        "steps=5",
        "--set",
        "cost=2.5",
        "--by",
        "alice",
        "--db",
        db_path,
        "--json",
    )
    assert code == 0, out
    limits = json.loads(out)["limits"]
    assert (limits["steps"], limits["cost"]["limit"]) == ({"limit": 5, "used": 1}, 2.5)
    assert json.loads(out)["policy"]["on_exceed"] == "pause"  # a raised limit keeps its policy
    code, out = invoke("budgets", "b1", "--set", "speed=3", "--by", "a", "--db", db_path)
    assert code == 2
    code, out = invoke("budgets", "b1", "--set", "webhook=ftp://x", "--by", "a", "--db", db_path)
    assert code == 2
    assert "http(s) URL" in out


def test_show_masks_secret_looking_values_and_unknown_says_why(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:

        @ledger.tool(kind="create", name="login")
        def login(user: str, password: str, *, idempotency_key: str) -> None:
            raise TimeoutError("no answer")

        with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
            run.effect("login", login, "ann", password="hunter2-XY")
    code, out = invoke("show", "r", "--db", db_path)
    assert code == 0
    assert "hunter2-XY" not in out
    assert '"password":"••••••"' in out
    code, out = invoke("unknown", "--db", db_path)
    assert "raised TimeoutError: no answer" in out
    assert "hunter2-XY" not in out
    code, out = invoke("unknown", "--db", db_path, "--json")
    assert "TimeoutError" in json.loads(out)[0]["reason"]


def test_completion_scripts(db_path: str) -> None:
    code, out = invoke("completion", "bash")
    assert code == 0
    assert "_ONCELOG_COMPLETE" in out
    env = {**os.environ, "_ONCELOG_COMPLETE": "bash_complete", "COMP_WORDS": "oncelog res",
           "COMP_CWORD": "1"}  # fmt: skip
    done = subprocess.run(
        python("-c", "from oncelog.cli import main; main()"),
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "resolve" in done.stdout
    assert "resume" in done.stdout
