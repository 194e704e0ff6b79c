"""The operator's path from a halt to a resumed run: every message that stops a run names
the next command, every answer says what happens next, and errors about the ledger are
not usage banners. Through the real CLI, against real ledgers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def lookup() -> dict[str, object]:
    return {"usage": {"prompt_tokens": 12}, "max_tokens": 100}


def halt_on_mail(ledger: oncelog.Ledger, run_id: str = "r1") -> oncelog.AmbiguousOutcome:
    @ledger.tool(kind="create", name="send")
    def send(to: str, *, idempotency_key: str) -> None:
        raise ConnectionError("Connection refused")

    with pytest.raises(oncelog.AmbiguousOutcome) as stopped, ledger.run(run_id) as run:
        run.read("lookup", lookup)
        run.effect("mail", send, "a@example.com")
    return stopped.value


@pytest.fixture
def halted(db_path: str) -> str:
    with oncelog.open(db_path) as ledger:
        halt_on_mail(ledger)
    return db_path


# -- 1. errors and exit codes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["show", "nope"], 5, "no run named 'nope'"),
        (["budgets", "nope"], 5, "no run named 'nope'"),
        (["deny", "nope", "x", "--by", "al"], 5, "no run named 'nope'"),
        (["approve", "r1", "mail", "--by", "al"], 5, "never asked for one"),
        (["resume", "--run", "r1", "--by", "al"], 5, "no run kill switch is on"),
        (["resolve", "r1", "mial", "done", "--by", "al", "--result", "{}"], 5,
         "its steps: lookup, mail"),
    ],
)  # fmt: skip
def test_not_found_is_said_without_the_usage_banner(
    halted: str, args: list[str], code: int, says: str
) -> None:
    got, out = invoke(*args, "--db", halted)
    assert (got, "Usage:" in out, "--help" in out) == (code, False, False), out
    assert says in out


def test_resolving_twice_says_who_resolved_it_and_when(halted: str) -> None:
    first = ["resolve", "r1", "mail", "not_done", "--by", "alice", "--note", "no mail sent"]
    assert invoke(*first, "--db", halted)[0] == 0
    code, out = invoke("resolve", "r1", "mail", "done", "--by", "bob", "--result", "{}",
                       "--db", halted)  # fmt: skip
    assert code == 6
    assert "alice resolved it not_done at " in out
    assert "(no mail sent)" in out
    assert "Usage:" not in out
    with oncelog.open(halted) as ledger, pytest.raises(oncelog.AlreadyResolved) as again:
        ledger.resolve("r1", "mail", "abandon", by="bob")
    assert isinstance(again.value, oncelog.ConflictError)
    assert (again.value.run_id, again.value.step_id) == ("r1", "mail")


def test_a_command_line_mistake_keeps_the_banner(halted: str) -> None:
    code, out = invoke("resolve", "r1", "mail", "maybe", "--by", "al", "--db", halted)
    assert code == 2
    assert "Usage:" in out


def test_the_cli_shows_fields_beside_the_message_not_a_repr(halted: str) -> None:
    code, out = invoke("resolve", "r1", "nope", "abandon", "--by", "al", "--db", halted)
    assert code == 5
    assert "run_id=" not in out
    assert "  run: r1\n" in out
    assert "  step: nope\n" in out


def test_run_main_exits_with_the_table_and_explains_with_fields(db_path: str) -> None:
    script = (
        "import oncelog\n"
        f"ledger = oncelog.open({db_path!r})\n"
        "oncelog.run_main(lambda: ledger.resolve('nope', 's', 'abandon', by='al'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == oncelog.UnknownRun.exit_code == 5
    assert "oncelog: UnknownRun: no run named 'nope'\n  run: nope\n" in done.stderr


# -- 2. messages that stop a run name the next command ---------------------------------------


def test_an_effect_in_doubt_names_the_resolve_command(ledger: oncelog.Ledger) -> None:
    stopped = halt_on_mail(ledger, "ticket 7")
    for then in ("done --no-result", "not_done", "abandon"):  # each decision, as it pastes
        assert f"oncelog resolve 'ticket 7' mail {then} --by NAME --attempt 1" in str(stopped)
    assert "run_id=" not in str(stopped)
    assert (stopped.run_id, stopped.step_id) == ("ticket 7", "mail")


def test_a_budget_stop_names_the_budgets_command(ledger: oncelog.Ledger) -> None:
    budget = oncelog.Budget(steps=1)
    with pytest.raises(oncelog.BudgetExceeded) as stopped, ledger.run("b1", budget=budget) as run:
        run.read("one", lambda: 1)
        run.read("two", lambda: 2)
    assert "oncelog budgets b1 --set steps=NEW_LIMIT --by NAME" in str(stopped.value)
    assert "set_budget" not in str(stopped.value)


def test_a_kill_switch_names_the_resume_command(ledger: oncelog.Ledger) -> None:
    ledger.halt("lockout", by="detector", agent="mailer", ahead=True)  # no run of it yet
    with pytest.raises(oncelog.RunHalted) as stopped, ledger.run("h1", agent="mailer") as run:
        run.read("one", lambda: 1)
    assert "oncelog resume --agent mailer --by NAME" in str(stopped.value)


# -- 4. show: decisions, the journal, real durations ----------------------------------------


def test_show_lists_decisions_switches_and_the_journal(halted: str) -> None:
    with oncelog.open(halted) as ledger:
        ledger.halt("look first", by="ops", run="r1")
        ledger.halt("all mail", by="ops", agent="mailer", ahead=True)
        ledger.clear_halt(by="ann", run="r1", note="looked")
    invoke("resolve", "r1", "mail", "abandon", "--by", "alice", "--note", "sent by hand",
           "--db", halted)  # fmt: skip
    code, out = invoke("show", "r1", "--db", halted)
    assert code == 0
    assert "kill switch on by ops: look first" in out
    assert "kill switch off by ann: looked" in out
    assert "resolved abandon mail by alice: sent by hand" in out
    assert "next:\n  the run r1 is queued: restart its agent" in out
    code, out = invoke("show", "r1", "--journal", "--json", "--db", halted)
    shown = json.loads(out)
    assert [e["event"] for e in shown["journal"]][:2] == ["run_created", "lease_acquired"]
    assert {"resolved", "halt_set", "halt_cleared"} <= {d["event"] for d in shown["decisions"]}
    code, out = invoke("show", "r1", "--journal", "--db", halted)
    assert "journal:" in out
    assert " resolved " in out


def test_a_model_call_lasts_as_long_as_the_call(ledger: oncelog.Ledger) -> None:
    def slow() -> str:
        time.sleep(0.05)
        return "ok"

    with ledger.run("t1") as run:
        run.llm("think", slow)
        run.read("look", slow)
    for step in ledger.steps("t1"):
        assert step.finished_at is not None
        assert step.finished_at - step.started_at >= 0.045, step.step_id


def test_the_wall_clock_stops_when_the_run_completes(ledger: oncelog.Ledger) -> None:
    with ledger.run("w1", budget=oncelog.Budget(wall_clock=3600)) as run:
        run.read("one", lambda: 1)
    _, first = ledger.budget_usage("w1")
    time.sleep(0.2)
    _, later = ledger.budget_usage("w1")
    assert later.wall_clock == first.wall_clock


# -- 5. numbers are shown, JSON is JSON --------------------------------------------------------


def test_numbers_are_never_masked_credentials_are(halted: str) -> None:
    code, out = invoke("show", "r1", "--json", "--db", halted)
    assert code == 0
    lookup = json.loads(out)["steps"][0]
    assert lookup["result"] == {"usage": {"prompt_tokens": 12}, "max_tokens": 100}
    assert isinstance(lookup["args"], dict)
    assert "args_json" not in lookup


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ({"usage": {"prompt_tokens": 12, "completion_tokens": 3}}, None),
        ({"max_tokens": 100, "tokens": [1, 2], "amount": 4242}, None),
        ({"access_token": "abc"}, {"access_token": "••••••"}),
        ({"note": "Bearer abcdefghijkl"}, {"note": "••••••"}),
        ({"key": "sk_live_abcdefghijkl"}, {"key": "••••••"}),
        ({"number": 4242424242424242}, {"number": "••••••"}),
        ({"password": 123456}, {"password": "••••••"}),
        ({"id": 4242424242424241}, None),  # not a card number: fails the Luhn check
    ],
)
def test_what_is_masked(value: dict[str, object], shown: dict[str, object] | None) -> None:
    from oncelog.display import redact

    assert redact(value) == (value if shown is None else shown)


# -- 6. after a decision: what happens next ---------------------------------------------------


def test_every_decision_says_what_happens_next(halted: str) -> None:
    code, out = invoke("resolve", "r1", "mail", "not_done", "--by", "al", "--db", halted)
    assert code == 0
    assert "next: the run r1 is queued: restart its agent with run id r1" in out
    code, out = invoke("unknown", "--db", halted)
    assert "r1: decided, not moved yet" in out  # still in view until it moves
    with oncelog.open(halted) as ledger, pytest.raises(KeyError), ledger.run("r1") as run:
        run.read("lookup", lookup)  # the agent restarted: the run moved
        raise KeyError("stop here")
    code, out = invoke("unknown", "--db", halted)
    assert "r1" not in out


def test_a_halt_cleared_or_a_budget_raised_says_what_happens_next(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:
        ledger.submit("s1", {"n": 1})
        ledger.set_budget("s1", oncelog.Budget(steps=1), by="ops")
        with pytest.raises(oncelog.BudgetExceeded), ledger.run("s1") as run:
            run.read("one", lookup)
            run.read("two", lookup)
    code, out = invoke("budgets", "s1", "--set", "steps=5", "--by", "al", "--db", db_path)
    assert code == 0, out
    assert "next: the run s1 is queued: an `oncelog worker` takes it" in out
    invoke("halt", "--run", "s1", "--reason", "look", "--by", "ops", "--db", db_path)
    code, out = invoke("resume", "--run", "s1", "--by", "al", "--db", db_path)
    assert code == 0, out
    assert "next: the run s1 is queued" in out


def test_a_run_still_halted_lists_every_command_left(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:
        halt_on_mail(ledger)
        ledger.halt("look first", by="ops", run="r1")
    code, out = invoke("show", "r1", "--db", db_path)
    assert code == 0
    assert "  oncelog resolve r1 mail done --no-result --by NAME --attempt 1\n" in out
    assert "  oncelog resolve r1 mail not_done --by NAME --attempt 1\n" in out
    assert "  oncelog resolve r1 mail abandon --by NAME --attempt 1\n" in out
    assert "  oncelog resume --run r1 --by NAME\n" in out


def test_the_tree_is_drawn_as_it_is() -> None:
    tree = Path(oncelog._exceptions.__file__).read_text()
    for name in ("UnknownName", "ConflictError", "AlreadyResolved"):
        assert f"── {name}" in tree
