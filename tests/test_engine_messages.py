"""What the Celery, DBOS and Temporal adapters add to a stopped task's error
(``integrations/_engines.told``): each command whole, as it pastes, arguments filled in
and shell-quoted; never ``done|not_done|abandon`` or ``--run|--agent|--global``. Each is
then run as printed against a ledger in the state it names, and is accepted."""

from __future__ import annotations

import shlex
from pathlib import Path

import oncelog
from oncelog.integrations._engines import told

from .support.launch import run_python


def _commands(text: str) -> list[list[str]]:
    """The ``oncelog ...`` commands in ``text``, each as the shell splits it."""
    found = []
    for part in text.split("oncelog ")[1:]:
        words = shlex.split("oncelog " + part.split(" (")[0].split(";")[0].rstrip(". "))
        found.append(words)
    return found


def test_an_effect_in_doubt_names_each_decision_and_each_pastes(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.db")
    with oncelog.open(db) as ledger:
        flaky = ledger.tool(kind="create", name="send")(_drop)
        try:
            with ledger.run("wf 1/7") as run:
                run.effect("send", flaky, 1)
        except oncelog.AmbiguousOutcome as stopped:
            message = told(stopped).message
    assert "done|not_done" not in message
    commands = _commands(message.partition("a person must act: ")[2])
    assert [c[4] for c in commands] == ["done", "not_done", "abandon"]
    assert all(c[2:4] == ["wf 1/7", "send"] for c in commands)
    pasted = commands[1][1:]
    done = run_python("-m", "oncelog", *[w.replace("NAME", "ops") for w in pasted], "--db", db)
    assert done.returncode == 0, done.stdout + done.stderr


def test_approvals_and_budgets_name_their_whole_commands() -> None:
    asked = told(oncelog.ApprovalRequired("wait", run_id="-r", step_id="delete"))
    assert "oncelog approve --by NAME -- -r delete" in asked.message
    assert "oncelog deny --by NAME -- -r delete" in asked.message
    over = told(oncelog.BudgetPaused("over", run_id="r 2"))
    assert "oncelog budgets 'r 2' --set LIMIT=NEW_LIMIT --by NAME" in over.message
    halted = told(oncelog.RunHalted("on; clears it with: oncelog resume --run r --by NAME"))
    assert "--run|--agent" not in halted.message


def _drop(x: int, *, idempotency_key: str) -> int:
    raise ConnectionResetError("dropped before the answer")
