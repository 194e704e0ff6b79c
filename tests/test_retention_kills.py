"""Retention under SIGKILL and beside live runs, with real processes, on both stores.

``oncelog prune`` is killed before its archive is there, once it is there and before
anything is removed, and between the transactions that remove its runs: each time the
ledger verifies as it did before (less the runs removed), the archive is whole or absent,
and running the same command again finishes the job. A run that goes on while it is being
pruned (restarted, and killed with its effect in doubt) is never removed."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import oncelog

from .support.launch import environment, finish_within, python, run_python
from .support.provider_process import Provider
from .test_retention import age, completed, run_ids

Problems = set[tuple[str, str, str]]
RUNS = 40


def problems(url: str) -> Problems:
    """What ``verify`` finds: here only the aged steps' starts (``test_retention.age``)."""
    with oncelog.open(url, create=False) as ledger:
        return {(p.kind, p.run_id, p.message) for p in ledger.verify().problems}


def archived_runs(archive: Path) -> list[str]:
    lines = (json.loads(line) for line in archive.read_text().splitlines())
    return [line["run_id"] for line in lines if line["type"] == "pruned_run"]


def prune(url: str, archive: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        python("-m", "oncelog", "prune", "--db", url, "--older-than", "1d", "--to", archive,
               "--batch", "1", "--json"),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str]) -> bool:
    """True once ``condition`` holds; False if the process ended first."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return condition()
        time.sleep(0.002)
    raise AssertionError("the prune neither got there nor ended in 60 s")


def remaining(url: str) -> int:
    with oncelog.open(url, create=False) as ledger:
        return len(run_ids(ledger))


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    finish_within(process, 30, "a SIGKILLed prune")


def check_after_kill(url: str, archive: Path, before: Problems, everyone: set[str]) -> set[str]:
    """The ledger verifies as before less the runs removed; every run removed is in the
    archive, which is whole if it is there. Returns the runs left."""
    with oncelog.open(url, create=False) as ledger:
        left = run_ids(ledger)
    assert problems(url) == {p for p in before if p[1] in left}
    removed = everyone - left
    if archive.exists():
        assert removed <= set(archived_runs(archive))
        with oncelog.open(url, create=False) as ledger:
            checked = ledger.verify_archive(archive)
        assert checked.ok or not removed, checked.problems
    else:
        assert not removed  # nothing goes before its archive is written whole
    assert not list(archive.parent.glob(f"{archive.name}.*"))  # no stray copy by its name
    return left


def test_a_prune_killed_anywhere_leaves_a_verifiable_ledger_and_a_rerun_finishes(
    store_url: str, tmp_path: Path
) -> None:
    with oncelog.open(store_url) as ledger:
        everyone = {f"r{n:02}" for n in range(RUNS)}
        completed(ledger, *sorted(everyone))
    age(store_url, 3, *everyone)
    before = problems(store_url)
    assert {p[1] for p in before} == everyone  # only the aged starts

    # Killed while it writes its archive (as soon as its hidden file is there).
    early = tmp_path / "early.jsonl"
    process = prune(store_url, early)

    def writing() -> bool:
        return early.exists() or any(tmp_path.glob(".early.jsonl.*.partial"))

    wait_until(writing, process)
    kill(process)
    check_after_kill(store_url, early, before, everyone)
    if not early.exists():  # caught writing: the hidden file stays, holding nothing removed
        assert remaining(store_url) == len(everyone)
        assert list(tmp_path.glob(".early.jsonl.*.partial"))
    # Killed once its archive is written, before or as the first batch goes.
    archive = tmp_path / "archive.jsonl" if not early.exists() else early
    process = prune(store_url, archive)
    wait_until(archive.exists, process)
    kill(process)
    left = check_after_kill(store_url, archive, before, everyone)
    # Killed between batches, twice, each time given the same archive again.
    for _ in range(2):
        process = prune(store_url, archive)
        target = len(left) - 3

        def some_went(target: int = target) -> bool:
            return remaining(store_url) < target

        wait_until(some_went, process)
        kill(process)
        left = check_after_kill(store_url, archive, before, everyone)

    finished = run_python("-m", "oncelog", "prune", "--db", store_url, "--older-than", "1d",
                          "--to", archive, "--json", env=environment())  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["resumed"] is True
    left = check_after_kill(store_url, archive, before, everyone)
    assert not left & set(archived_runs(archive))  # the archive's runs are all gone
    verified = run_python("-m", "oncelog", "verify", "--db", store_url, "--archive", archive,
                          env=environment())  # fmt: skip
    assert verified.returncode == (1 if left else 0), verified.stdout
    assert "pruned:" in verified.stdout
    assert "PROBLEM archive" not in verified.stdout
    with oncelog.open(store_url, create=False) as ledger:
        report = ledger.verify()
    assert report.pruned_runs == len(everyone - left)


AGENT = """
import sys, oncelog
ledger = oncelog.open(sys.argv[1])

@ledger.tool(kind="create", name="send")
def send(n, *, idempotency_key):
    return n

with ledger.run("again") as run:
    run.effect("s0", send, 0)
    run.effect("s1", send, 1)  # killed once its intent is durable: in doubt
"""


def test_runs_that_go_on_while_they_are_pruned_are_kept(store_url: str, tmp_path: Path) -> None:
    """Between the archive and the removal, one archived run is started again and its
    process SIGKILLed with an effect in doubt, and a person halts another: the prune
    that finishes the archive removes neither, and removes the rest."""
    from oncelog.audit._prune import _write_archive

    with oncelog.open(store_url) as ledger:
        completed(ledger, "quiet", "halted")
        send = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
        try:
            with ledger.run("again") as run:
                run.effect("s0", send, 0)
                raise RuntimeError("the agent's own bug: it fails, and is started again")
        except RuntimeError:
            pass
    age(store_url, 3, "quiet", "halted", "again")
    archive = tmp_path / "archive.jsonl"
    with oncelog.open(store_url) as ledger:
        due = ledger.store.prune_candidates(86400.0, {}, 100)
        assert sorted(due) == ["again", "halted", "quiet"]
        _write_archive(ledger.store, archive, due)  # the prune's first half

    agent = run_python("-c", AGENT, store_url, env=environment("after_intent_commit@s1"))
    assert agent.returncode == -signal.SIGKILL, agent.stderr
    with oncelog.open(store_url) as ledger:
        ledger.halt("looking into it", by="ops", run="halted")
        before = problems(store_url)
        report = ledger.prune(archive, older_than=86400.0)
        assert [run.run_id for run in report.removed] == ["quiet"]
        assert sorted(report.kept) == ["again", "halted"]
        assert run_ids(ledger) == {"again", "halted"}
        assert [step.state.value for step in ledger.steps("again")] == ["done", "in_flight"]
    assert problems(store_url) == {p for p in before if p[1] != "quiet"}


RESTARTER = """
import os, sys, time, oncelog
ledger = oncelog.open(sys.argv[1])
called = []

@ledger.tool(kind="create", name="send")
def send(n, *, idempotency_key):
    called.append(n)
    return n

@ledger.tool(kind="destructive", name="wipe")
def wipe(n, *, idempotency_key):
    return n

while not os.path.exists(sys.argv[2]):  # the prune has archived the runs: race it
    time.sleep(0.001)
for run_id in sys.argv[3:]:
    called.clear()
    try:
        with ledger.run(run_id) as run:
            run.effect("s0", send, 0)
            # s0 replayed: the run kept its history, and now waits for a person.
            print(run_id, "fresh" if called else "kept", flush=True)
            run.effect("wipe", wipe, 1)
    except oncelog.ApprovalRequired:
        pass
    except oncelog.RunPruned:  # it went before the agent reached it: not started again
        print(run_id, "pruned", flush=True)
"""


def test_a_run_that_starts_waiting_during_a_prune_is_never_removed(
    store_url: str, tmp_path: Path
) -> None:
    """A prune and an agent that starts the same failed runs again, side by side: each
    run either went before the agent reached it (the agent is then refused, and starts
    nothing) or the agent took it first and it now waits for an approval; such a run is
    kept with its history, whatever the prune archived."""
    everyone = [f"f{n:02}" for n in range(RUNS)]
    with oncelog.open(store_url) as ledger:
        send = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
        for run_id in everyone:
            try:
                with ledger.run(run_id) as run:
                    run.effect("s0", send, 0)
                    raise RuntimeError("the agent's own bug")
            except RuntimeError:
                pass
    age(store_url, 3, *everyone)
    archive = tmp_path / "archive.jsonl"
    restarting = subprocess.Popen(
        python("-c", RESTARTER, store_url, archive, *reversed(everyone)),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1)  # ready before the prune starts
    pruning = prune(store_url, archive)
    out, err = finish_within(restarting, 120, "the agent restarting runs")
    assert restarting.returncode == 0, err
    finish_within(pruning, 120, "the prune")
    assert pruning.returncode == 0
    seen = dict(line.split() for line in out.splitlines())
    kept = {run_id for run_id, how in seen.items() if how == "kept"}
    gone = {run_id for run_id, how in seen.items() if how == "pruned"}
    assert kept | gone == set(everyone)  # none started afresh
    assert gone <= set(archived_runs(archive))
    with oncelog.open(store_url, create=False) as ledger:
        waiting = {run.run_id for run in ledger.runs(oncelog.RunStatus.WAITING, limit=1000)}
        assert kept <= waiting
        assert not gone & run_ids(ledger)
        # A run with its history (its first step from days ago): those kept, and those
        # neither pruned nor reached; only they show the aged starts to verify.
        original = {
            run.run_id for run in ledger.runs(limit=1000)
            if ledger.steps(run.run_id)[0].started_at < time.time() - 86400
        }  # fmt: skip
        assert kept <= original
        report = ledger.verify()
    assert {p.run_id for p in report.problems} <= original


REFUNDER = """
import json, os, sys, urllib.request, oncelog
ledger = oncelog.open(sys.argv[1], create=False)
current = []

@ledger.tool(kind="payment", name="refund")
def refund(order, *, idempotency_key):
    body = {"key": idempotency_key, "run": current[0], "payload": order}
    request = urllib.request.Request(
        sys.argv[2] + "/effect", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())

for run_id in sys.argv[3:]:
    current[:] = [run_id]
    try:
        with ledger.run(run_id) as run:
            run.effect("refund", refund, run_id)
        print(run_id, "ran", flush=True)
    except oncelog.RunPruned:
        print(run_id, "pruned", flush=True)
"""


def refunds(url: str, provider: Provider, run_ids: list[str]) -> subprocess.Popen[str]:
    """An agent process that enters each run and refunds its order once."""
    return subprocess.Popen(
        python("-c", REFUNDER, url, provider.url, *run_ids),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def entered(process: subprocess.Popen[str]) -> dict[str, str]:
    out, err = finish_within(process, 120, "the refunding agent")
    assert process.returncode == 0, err
    return dict(line.split() for line in out.splitlines())


def test_a_run_pruned_by_a_killed_prune_never_refunds_again(
    store_url: str, tmp_path: Path, provider: Provider
) -> None:
    """``oncelog prune`` SIGKILLed between its batches, twice, the second time while an
    agent in another process enters every run again; then finished, and every run
    entered again: a removed run is refused (``RunPruned``) from the instant its batch
    commits, one still there replays its refund. The provider, which ignores keys,
    performed each run's refund once."""
    everyone = [f"refund-{n:02}" for n in range(RUNS)]
    with oncelog.open(store_url):  # the ledger, created
        pass
    assert set(entered(refunds(store_url, provider, everyone)).values()) == {"ran"}
    age(store_url, 3, *everyone)
    archive = tmp_path / "archive.jsonl"

    process = prune(store_url, archive)
    wait_until(lambda: remaining(store_url) < RUNS - 3, process)
    kill(process)
    first_gone = set(everyone) - {r for r in everyone if r in _left(store_url)}
    assert first_gone
    # Again, with an agent entering every run meanwhile (the longest ended first, as
    # the prune takes them), and killed again.
    process = prune(store_url, archive)
    agent = refunds(store_url, provider, everyone)
    wait_until(lambda: remaining(store_url) < RUNS - len(first_gone) - 3, process)
    kill(process)
    racing = entered(agent)
    assert {r for r, how in racing.items() if how == "pruned"} >= first_gone
    finished = run_python("-m", "oncelog", "prune", "--db", store_url, "--older-than", "1d",
                          "--to", archive, "--json", env=environment())  # fmt: skip
    assert finished.returncode == 0, finished.stderr

    last = entered(refunds(store_url, provider, everyone))
    left = _left(store_url)
    assert {r for r, how in last.items() if how == "pruned"} == set(everyone) - left
    assert set(everyone) - left <= set(archived_runs(archive))
    assert {run: provider.total(run) for run in everyone} == dict.fromkeys(everyone, 1)
    with oncelog.open(store_url, create=False) as ledger:
        report = ledger.verify()
    assert report.pruned_runs == len(set(everyone) - left)
    assert {p.run_id for p in report.problems} <= left  # only the aged starts kept


def _left(url: str) -> set[str]:
    with oncelog.open(url, create=False) as ledger:
        return run_ids(ledger)
