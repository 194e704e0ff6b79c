"""``oncelog crashtest`` on real agent processes, killed and restarted for real.

The agents (``tests/crashtest_agents``) are one shop's agent, done right and with each
mistake crashtest must catch. Their provider is a file each performed effect appends to,
so what happened in the world is counted apart from the ledger crashtest reads. Each case
is checked by exit code and by the report's JSON.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli
from oncelog.showcases.crashtest import trials
from oncelog.showcases.crashtest.evidence import Evidence
from oncelog.showcases.crashtest.findings import ran_twice

from .crashtest_agents.shop import PROVIDER_ENV
from .support.launch import PYTHON

ROOT = Path(__file__).resolve().parent.parent
IN_DOUBT = ("after_intent_commit", "after_call", "before_outcome_commit")


@pytest.fixture
def provider_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The provider's records; the agents are run as ``python -m tests.crashtest_agents.X``."""
    records = tmp_path / "provider.jsonl"
    records.touch()
    monkeypatch.setenv(PROVIDER_ENV, str(records))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return records


def crashtest(*argv: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["crashtest", "--json", *argv])
    assert result.exit_code in (0, 1), result.output
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["passed"] is (result.exit_code == 0)
    return result.exit_code, report


def agent(name: str) -> list[str]:
    return ["--", PYTHON, "-m", f"tests.crashtest_agents.{name}"]


def performed(records: Path) -> Counter[tuple[str, str]]:
    """How many times the provider performed each (tool, key)."""
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    return Counter((line["tool"], line["key"]) for line in lines)


def problems(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for trial in report["trials"] for p in trial["problems"] if p["kind"] == kind]


def test_a_correct_agent_passes_at_every_boundary(provider_records: Path) -> None:
    """Killed at each of the 15 boundaries of its 3 effects: nothing runs twice. The
    create in doubt halts; the payment's probe settles it; the upsert (a true one,
    accepted with --idempotent) runs again."""
    code, report = crashtest("--idempotent", "set_status", *agent("correct_agent"))
    assert code == 0
    assert [e["step_id"] for e in report["effects"]] == ["open_ticket", "charge", "set_status"]
    trials = report["trials"]
    assert len(trials) == 15
    assert len({t["run_id"] for t in trials}) == 15
    for trial in trials:
        halts = trial["step_id"] == "open_ticket" and trial["point"] in IN_DOUBT
        assert trial["outcome"] == ("halted" if halts else "completed"), trial
        assert trial["exit_code"] == (oncelog.EXIT_HALTED if halts else 0)
        assert trial["restarts"] == 1
        assert trial["problems"] == []
        assert trial["crash_at"] == f"{trial['point']}:{trial['effect']}"
    # The charge in doubt was settled on its probe's word: the report says so.
    relied = {(r["tool"], r["relied_on"]) for t in trials for r in t["recoveries"]}
    assert relied == {("charge", "probe")}
    assert report["counted_at"] == "ledger"
    once = {
        key: n for (tool, key), n in performed(provider_records).items() if tool != "set_status"
    }
    assert set(once.values()) == {1}


def test_an_upsert_that_creates_is_reported_from_the_attempts(provider_records: Path) -> None:
    """Killed after the provider made the ticket, the restart makes a second one. crashtest
    reports it from the ledger's two attempts under one key; also when the kill came before
    the call, since the ledger cannot tell the two apart."""
    points = ("--point", "after_intent_commit", "--point", "after_call")
    code, report = crashtest(*points, "--idempotent", "set_status", *agent("false_upsert_agent"))
    assert code == 1
    reported = problems(report, "ran_twice")
    assert {(p["step_id"], p["tool"]) for p in reported} == {("open_ticket", "open_ticket")}
    assert [t["step_id"] for t in report["trials"] if t["problems"]] == ["open_ticket"] * 2
    tickets = {
        key: n for (tool, key), n in performed(provider_records).items() if tool == "open_ticket"
    }
    twice = {key for key, n in tickets.items() if n > 1}
    assert len(twice) == 1  # after_call; after_intent_commit was killed before the call
    assert twice < {p["key"] for p in reported}
    assert "kind='create'" in reported[0]["fix"]
    assert "--idempotent open_ticket" in reported[0]["fix"]


def test_a_run_id_made_at_process_start_is_caught(provider_records: Path, tmp_path: Path) -> None:
    """Every restart opens a new run: the killed run is never resumed and every effect
    before the kill is performed again, under a new key."""
    kept = tmp_path / "kept"
    code, report = crashtest(
        "--point", "after_call", "--keep", str(kept), *agent("uuid_run_id_agent")
    )
    assert code == 1
    assert report["ledgers"] == str(kept)
    for number, trial in enumerate(report["trials"], 1):
        [problem] = trial["problems"]
        assert problem["kind"] == "run_id_at_start"
        assert problem["step_id"] == trial["step_id"]
        assert problem["run_id"] != trial["run_id"]  # the agent ignored the one it was given
        assert "ONCELOG_RUN_ID" in problem["fix"]
        with oncelog.open(str(kept / f"{number:03d}" / "ledger.db")) as ledger:
            runs = {run.run_id: run.status for run in ledger.runs()}
        assert runs[problem["run_id"]] is oncelog.RunStatus.RUNNING
        assert sorted(runs.values()) == [oncelog.RunStatus.COMPLETED, oncelog.RunStatus.RUNNING]
    tickets = sum(
        n for (tool, _), n in performed(provider_records).items() if tool == "open_ticket"
    )
    assert tickets == 1 + 3 * 2  # the clean run's, then one per process of each trial


def test_step_ids_that_change_between_attempts_are_caught(provider_records: Path) -> None:
    """A timestamp in every step id: the restart asks, at a recorded position, for the same
    tool under a new id; oncelog halts instead of running it, crashtest names it."""
    code, report = crashtest("--point", "after_intent_commit", *agent("changing_step_ids_agent"))
    assert code == 1
    for trial in report["trials"]:
        assert trial["outcome"] == "halted"
        [problem] = trial["problems"]
        assert problem["kind"] == "step_ids_change"
        assert re.fullmatch(r"triage-\d+", problem["step_id"]), problem
        assert problem["tool"] == "classify"
        assert "plan" in problem["fix"]
    assert set(performed(provider_records).values()) == {1}


def journal(kind: str, *between: tuple[str, dict[str, Any]], reason: str | None = None) -> Evidence:
    """One effect's journal: an intent, what came between, and a second intent."""
    intent = {"type": "effect", "kind": kind, "tool": "t", "step_id": "s", "key": "k"}
    entries = [
        ("intent", {**intent, "attempt": 1, "reason": None}),
        *between,
        ("intent", {**intent, "attempt": 2, "reason": reason}),
    ]
    return Evidence(
        (), tuple(oncelog.JournalEntry(n, "r", 0, e, d, 0.0) for n, (e, d) in enumerate(entries, 1))
    )


def test_a_second_attempt_counts_unless_something_said_the_first_did_not_happen() -> None:
    """The journal's verdicts on a second attempt: a probe's answer (the intent's reason),
    a person's ``not_done`` or an idempotent tool's recorded failure allow it; a read is
    never reported; a create retried blindly would be oncelog's own bug, and says so."""
    unknown = ("unknown", {"reason": "in doubt"})
    [blind] = ran_twice(journal("create", unknown))
    assert (blind.step_id, blind.key) == ("s", "k")
    assert "bug" in blind.fix
    assert ran_twice(journal("create", unknown, reason="the probe answered not_found")) == []
    assert ran_twice(journal("create", unknown, ("resolved", {"resolution": "not_done"}))) == []
    assert ran_twice(journal("upsert", ("outcome", {"state": "not_done"}))) == []
    assert ran_twice(journal("read")) == []
    [upsert] = ran_twice(journal("upsert"))
    assert "--idempotent t" in upsert.fix
    assert ran_twice(journal("upsert"), accepted={"t"}) == []


def test_an_agent_that_cannot_be_tested_exits_2(provider_records: Path) -> None:
    failing = CliRunner().invoke(cli, ["crashtest", "--", PYTHON, "-c", "exit(5)"])
    assert failing.exit_code == 2
    assert "did not complete (exit 5)" in failing.output
    idle = CliRunner().invoke(cli, ["crashtest", "--", PYTHON, "-c", "print('hi')"])
    assert idle.exit_code == 2
    assert "without recording any effect" in idle.output


def tutorial_agent() -> tuple[str, str, str]:
    """The agent of docs/tutorial.md, its refund with a probe, and with a probe and a
    deduplication window."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs/tutorial.md").read_text(), re.S)
    agent_code, probe_code, dedupe_code, *_ = blocks
    refund = probe_code[probe_code.index("@oncelog.tool") :].replace(", probe=find_refund", "")
    assert refund in agent_code
    find_refund = probe_code[: probe_code.index("@oncelog.tool")]
    return (
        agent_code,
        agent_code.replace(refund, probe_code),
        agent_code.replace(refund, find_refund + dedupe_code),
    )


def test_the_tutorial_agent_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the tutorial says: without a probe the refund and the email halt when in doubt;
    with one, the refund completes. Its run id comes from {run_id} in its arguments."""
    monkeypatch.setenv("OUTBOX", str(tmp_path / "outbox"))
    outcomes = {}
    for name, code in zip(("plain", "probed", "deduplicated"), tutorial_agent(), strict=True):
        script = tmp_path / f"{name}.py"
        script.write_text(code)
        exit_code, report = crashtest(
            "--point", "after_call", "--", PYTHON, str(script), "{run_id}"
        )
        assert exit_code == 0
        outcomes[name] = {t["step_id"]: t["outcome"] for t in report["trials"]}
    assert outcomes == {
        "plain": {"refund": "halted", "email": "halted"},
        "probed": {"refund": "completed", "email": "halted"},
        "deduplicated": {"refund": "completed", "email": "halted"},
    }


def test_reset_runs_before_every_trial(provider_records: Path, tmp_path: Path) -> None:
    resets = tmp_path / "resets.txt"
    reset = f'echo "$ONCELOG_RUN_ID" >> {resets}; : > {provider_records}'
    code, report = crashtest(
        "--point", "after_call", "--idempotent", "set_status", "--reset", reset,
        *agent("correct_agent"),
    )  # fmt: skip
    assert code == 0, report
    trials = report["trials"]
    run_ids = resets.read_text().split()
    assert len(run_ids) == 1 + len(trials)  # the clean run, then each trial
    assert run_ids[1:] == [t["run_id"] for t in trials]
    # Emptied before each trial, the provider holds one trial's effects (an upsert in
    # doubt runs twice), not those of the three trials.
    assert len(provider_records.read_text().splitlines()) <= len(report["effects"]) + 1


def test_a_failing_reset_stops_crashtest(provider_records: Path) -> None:
    result = CliRunner().invoke(
        cli, ["crashtest", "--reset", "echo no sandbox; exit 3", *agent("correct_agent")]
    )
    assert result.exit_code == 2
    assert "the --reset command failed (exit 3)" in result.output
    assert "no sandbox" in result.output


def count_command() -> str:
    return f"{PYTHON} -m tests.crashtest_agents.provider_count"


def test_an_agent_with_an_approval_is_proven_with_a_test_person(
    provider_records: Path, tmp_path: Path
) -> None:
    """The charge waits for approval (exit 4). Without --approve crashtest cannot test it
    and says how; with one, each request is granted in the test person's name, journalled
    as crashtest's, and every boundary of the charge is reached: the first process stops at
    the approval, the next one is killed at the boundary."""
    waiting = CliRunner().invoke(cli, ["crashtest", *agent("approval_agent")])
    assert waiting.exit_code == 2
    assert "did not complete (exit 4)" in waiting.output
    assert "--approve NAME" in waiting.output
    kept = tmp_path / "kept"
    code, report = crashtest(
        "--approve", "tess", "--keep", str(kept), "--idempotent", "set_status",
        "--count", count_command(), *agent("approval_agent"),
    )  # fmt: skip
    assert code == 0, report
    assert report["approved_by"] == "tess"
    charges = [t for t in report["trials"] if t["step_id"] == "charge"]
    assert len(charges) == 5
    for trial in charges:
        assert trial["outcome"] == "completed", trial
        assert trial["approvals"] >= 1
    for number, trial in enumerate(report["trials"], 1):
        if trial["step_id"] != "charge":
            continue
        with oncelog.open(str(kept / f"{number:03d}" / "ledger.db")) as ledger:
            decided = [e.data for e in ledger.iter_journal() if e.event == "approval_approved"]
            granted = ledger.approvals(None)
        assert granted
        assert {a.decided_by for a in granted} == {"tess"}
        assert {(d["by"], d["note"]) for d in decided} == {("tess", trials.APPROVAL_NOTE)}
        assert len(decided) == len(granted)
    charges = [n for (tool, _), n in performed(provider_records).items() if tool == "charge"]
    assert set(charges) == {1}  # each trial's run charged at most once


def test_a_window_the_provider_does_not_honour_is_caught_only_at_the_provider(
    provider_records: Path,
) -> None:
    """open_ticket declares a dedupe_window, but its provider ignores keys: killed after
    the call, the restart sends it again on the window's word and the provider opens a
    second ticket. From the ledger, crashtest passes but says what it could not see; with
    --count it fails, naming the window."""
    points = ("--point", "after_call", "--idempotent", "set_status")
    code, blind = crashtest(*points, *agent("dedupe_window_agent"))
    assert code == 0
    assert blind["counted_at"] == "ledger"
    [window] = [r for t in blind["trials"] for r in t["recoveries"] if r["tool"] == "open_ticket"]
    assert window["relied_on"] == "dedupe_window"
    tickets = [n for (tool, _), n in performed(provider_records).items() if tool == "open_ticket"]
    assert max(tickets) == 2  # what the ledger did not show
    said = CliRunner().invoke(cli, ["crashtest", *points, *agent("dedupe_window_agent")])
    assert said.exit_code == 0
    assert "counted from the ledger" in said.output
    assert "not on what the provider showed" in said.output
    assert "open_ticket on a declared dedupe_window: after_call 1" in said.output

    code, counted = crashtest(*points, "--count", count_command(), *agent("dedupe_window_agent"))
    assert code == 1
    assert counted["counted_at"] == "provider"
    [problem] = problems(counted, "performed_twice")
    assert (problem["step_id"], problem["tool"]) == ("open_ticket", "open_ticket")
    assert "dedupe_window" in problem["detail"]
    assert "Remove dedupe_window from open_ticket" in problem["fix"]
    [trial] = [t for t in counted["trials"] if t["problems"]]
    assert trial["performed"]["open_ticket"] == 2


def test_a_count_command_that_prints_nonsense_stops_crashtest(provider_records: Path) -> None:
    result = CliRunner().invoke(cli, ["crashtest", "--count", "echo lots", *agent("correct_agent")])
    assert result.exit_code == 2
    assert "must print a number" in result.output
    nothing = CliRunner().invoke(cli, ["crashtest", "--count", "echo 0", *agent("correct_agent")])
    assert nothing.exit_code == 2
    assert "counted nothing" in nothing.output
