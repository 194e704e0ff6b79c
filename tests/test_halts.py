"""The kill switch: durable, checked before every step, cleared only by a named person."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import oncelog

from .support import oncelog_cli
from .support.launch import python

LOOPER = Path(__file__).parent / "halt_agents" / "looper.py"


def looper(
    store_url: str,
    markers: Path,
    *extra: str,
    run_id: str = "r1",
    agent: str = "support",
    count: int = 4,
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        python(str(LOOPER), store_url, run_id, agent, str(markers), str(count), *extra),
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def sent(markers: Path) -> list[str]:
    return markers.read_text().splitlines() if markers.exists() else []


def test_a_halt_from_another_process_stops_the_next_effect_across_restarts(
    store_url: str, tmp_path: Path
) -> None:
    markers, go = tmp_path / "markers", tmp_path / "go"
    agent = looper(store_url, markers, "--pause-after", "2", "--go", str(go))
    try:
        while len(sent(markers)) < 2:
            assert agent.poll() is None, finish(agent)
        oncelog_cli(store_url, "halt", "--global", "--reason", "incident 42", "--by", "oncall")
        go.touch()
        code, stderr = finish(agent)
    finally:
        agent.kill()
        agent.communicate()
    assert code == oncelog.EXIT_HALTED
    assert "RunHalted" in stderr
    assert "incident 42" in stderr
    assert len(sent(markers)) == 2
    for _ in range(5):  # a crash loop restarting it never clears the switch
        code, _ = finish(looper(store_url, markers))
        assert code == oncelog.EXIT_HALTED
    assert len(sent(markers)) == 2
    with oncelog.open(store_url) as ledger:
        assert [s.step_id for s in ledger.steps("r1")] == ["email-0", "email-1"]
    assert "cleared" in oncelog_cli(
        store_url, "resume", "--global", "--by", "alice", "--note", "fixed"
    )
    code, _ = finish(looper(store_url, markers))
    assert code == 0
    assert len(sent(markers)) == len(set(sent(markers))) == 4
    with oncelog.open(store_url) as ledger:
        events = [(e.event, e.data.get("by")) for e in ledger.journal(limit=10_000)]
        [halt] = ledger.halts(active_only=False)
    assert ("halt_set", "oncall") in events
    assert ("halt_cleared", "alice") in events
    assert (halt.cleared_by, halt.note, halt.active) == ("alice", "fixed", False)


def test_a_detector_halt_set_by_code_survives_restarts(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    code, stderr = finish(looper(store_url, markers, "--detector-halt-after", "1"))
    assert code == oncelog.EXIT_HALTED
    assert "account locked out" in stderr
    for _ in range(3):
        code, _ = finish(looper(store_url, markers))
        assert code == oncelog.EXIT_HALTED
    assert len(sent(markers)) == 1
    assert "run r1: account locked out (set by lockout-detector" in oncelog_cli(store_url, "halts")
    oncelog_cli(store_url, "resume", "--run", "r1", "--by", "bob")
    code, _ = finish(looper(store_url, markers))
    assert code == 0
    assert len(set(sent(markers))) == len(sent(markers)) == 4


def test_scopes(ledger: oncelog.Ledger) -> None:
    calls: list[str] = []

    @ledger.tool(kind="create", name="t")
    def tool(*, idempotency_key: str) -> None:
        calls.append(idempotency_key)

    def attempt(run_id: str, agent: str) -> bool:
        try:
            with ledger.run(run_id, agent=agent) as run:
                run.effect("e", tool)
        except oncelog.RunHalted:
            return False
        return True

    ledger.halt("billing paused", by="ops", agent="billing", ahead=True)
    assert not attempt("b1", "billing")
    assert attempt("s1", "support")
    ledger.halt("this ticket", by="ops", run="s2", ahead=True)
    assert not attempt("s2", "support")
    assert attempt("s3", "support")
    ledger.halt("everything", by="ops")
    assert not attempt("s4", "support")
    ledger.clear_halt(by="ops")
    ledger.clear_halt(by="ops", agent="billing")
    ledger.clear_halt(by="ops", run="s2")
    assert all(attempt(r, a) for r, a in [("b1", "billing"), ("s2", "support"), ("s4", "support")])
    assert len(calls) == 5


def test_model_calls_and_reads_are_stopped_before_they_spend(ledger: oncelog.Ledger) -> None:
    spent: list[str] = []
    ledger.halt("budget incident", by="ops")
    with pytest.raises(oncelog.RunHalted), ledger.run("r") as run:
        run.llm("think", lambda: spent.append("tokens"))
    with pytest.raises(oncelog.RunHalted), ledger.run("r") as run:
        run.read("look", lambda: spent.append("query"))
    assert spent == []
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED


def test_a_halt_does_not_stop_recording_an_effect_already_in_flight(
    ledger: oncelog.Ledger, store_url: str
) -> None:
    @ledger.tool(kind="payment", name="charge")
    def charge(*, idempotency_key: str) -> str:
        with oncelog.open(store_url) as other:  # someone hits the switch mid-call
            other.halt("fraud alert", by="ops")
        return "ch_1"

    with pytest.raises(oncelog.RunHalted), ledger.run("r") as run:
        assert run.effect("pay", charge) == "ch_1"
        run.effect("pay-again", charge)
    assert [(s.step_id, s.state) for s in ledger.steps("r")] == [("pay", oncelog.StepState.DONE)]


def test_misuse_is_typed(ledger: oncelog.Ledger) -> None:
    with pytest.raises(oncelog.UnknownHalt):
        ledger.clear_halt(by="ops", agent="nobody")
    with pytest.raises(oncelog.ConfigurationError):
        ledger.clear_halt(by="")
    with pytest.raises(oncelog.ConfigurationError):
        ledger.halt("x", by="ops", run="r", agent="a")
    first = ledger.halt("first", by="ops")
    assert ledger.halt("second", by="ops") == first
    with ledger.run("r", agent="a"):
        pass
    with pytest.raises(oncelog.ConfigurationError, match="belongs to agent 'a'"):
        ledger.run("r", agent="b").__enter__()
