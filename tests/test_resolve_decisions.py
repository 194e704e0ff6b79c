"""A person's decision on an effect in doubt, made carelessly.

- While a live process holds the run's lease it may be inside the tool this instant: a
  decision then would replace the provider's real answer with a guess. ``oncelog
  resolve``, ``Ledger.resolve`` and the console refuse it (``RunLeased``, exit 75) unless
  forced, and a forced one is journalled with the owner it overrode. Tested with a real
  agent process blocked inside its tool and the CLI run from another process.
- ``done`` without the result is refused; ``--no-result`` / ``oncelog.NO_RESULT`` is the
  explicit way, and the agent gets ``NO_RESULT`` there, live and on every replay.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import shlex
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog.audit._verify import verify as verify_journal

from .support.launch import PYTHON, python

RACER = Path(__file__).parent / "race_agents" / "racer.py"
TIMEOUT = 60.0
KEY = oncelog.idempotency_key("live", "charge", "append_marker")


def oncelog_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, as a person at another terminal runs it."""
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_URL"}
    return subprocess.run(
        python("-m", "oncelog", *args),
        capture_output=True, text=True, timeout=TIMEOUT, check=False, env=env,
    )  # fmt: skip


def read_line(fd: int) -> str:
    data = b""
    deadline = time.monotonic() + TIMEOUT
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, "the agent did not enter its tool"
        chunk = os.read(fd, 1)
        assert chunk, "the agent ended before entering its tool"
        data += chunk
    return data.decode().strip()


@dataclass
class Inside:
    """An agent process blocked inside its tool, after the provider acted."""

    proc: subprocess.Popen[str]
    release_fd: int
    marker: Path
    released: bool = False

    def release(self) -> tuple[int, dict[str, Any] | None, str]:
        """Let the tool return; the agent's exit code, its report and its stderr."""
        os.close(self.release_fd)
        self.released = True
        out, err = self.proc.communicate(timeout=TIMEOUT)
        return self.proc.returncode, json.loads(out) if out.strip() else None, err


@contextmanager
def agent_inside_its_tool(store_url: str, tmp_path: Path) -> Iterator[Inside]:
    in_tool_read, in_tool_write = os.pipe()
    hold_read, hold_write = os.pipe()
    marker = tmp_path / "provider.log"
    proc = subprocess.Popen(
        [PYTHON, str(RACER), store_url, "live", "--marker", str(marker),
         "--in-tool", str(in_tool_write), "--hold", str(hold_read)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        pass_fds=(in_tool_write, hold_read),
    )  # fmt: skip
    os.close(in_tool_write)
    os.close(hold_read)
    inside = Inside(proc, hold_write, marker)
    try:
        assert read_line(in_tool_read) == str(proc.pid)
        yield inside
    finally:
        os.close(in_tool_read)
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        if not inside.released:
            os.close(hold_write)


def resolved_entries(ledger: oncelog.Ledger, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in ledger.journal(run_id) if e.event == "resolved"]


def test_a_live_process_running_the_effect_is_not_overruled(store_url: str, tmp_path: Path) -> None:
    with agent_inside_its_tool(store_url, tmp_path) as inside:
        guess = ("resolve", "live", "charge", "done", "--by", "alice", "--result", "{}")
        refused = oncelog_cli(*guess, "--db", store_url)
        assert refused.returncode == 75, refused.stderr
        assert refused.stderr.startswith("Error: RunLeased: a live process"), refused.stderr
        assert "--force" in refused.stderr
        with oncelog.open(store_url, create=False) as ledger:
            with pytest.raises(oncelog.RunLeased) as leased:
                ledger.resolve("live", "charge", "not_done", by="bob")
            assert (leased.value.run_id, leased.value.step_id, leased.value.key) == (
                "live", "charge", KEY,
            )  # fmt: skip
            copy = pickle.loads(pickle.dumps(leased.value))
            assert (type(copy), str(copy)) == (oncelog.RunLeased, str(leased.value))
            [step] = [s for s in ledger.steps("live") if s.step_id == "charge"]
            assert step.state is oncelog.StepState.IN_FLIGHT
            assert resolved_entries(ledger, "live") == []
        code, report, err = inside.release()
    assert code == 0, err
    assert report is not None
    assert report["result"] == {"pid": inside.proc.pid, "note": "hello"}  # the real answer
    assert inside.marker.read_text().splitlines() == [f"{inside.proc.pid} {KEY}"]
    with oncelog.open(store_url) as ledger:
        [step] = [s for s in ledger.steps("live") if s.step_id == "charge"]
        assert (step.state, step.result) == (oncelog.StepState.DONE, report["result"])
        assert ledger.get_run("live").status is oncelog.RunStatus.COMPLETED


def test_a_forced_decision_is_journalled_and_fences_the_process(
    store_url: str, tmp_path: Path
) -> None:
    with agent_inside_its_tool(store_url, tmp_path) as inside:
        forced = oncelog_cli(
            "resolve", "live", "charge", "done", "--by", "alice", "--result", '{"id": 1}',
            "--force", "--note", "seen at the provider", "--db", store_url,
        )  # fmt: skip
        assert forced.returncode == 0, forced.stderr
        code, _, err = inside.release()
    assert code == 75, err  # its outcome cannot be written over the person's decision
    assert "LeaseLost" in err
    with oncelog.open(store_url) as ledger:
        [entry] = resolved_entries(ledger, "live")
        assert entry["by"] == "alice"
        assert entry["forced"].split("|")[1] == str(inside.proc.pid)
        [step] = [s for s in ledger.steps("live") if s.step_id == "charge"]
        assert (step.state, step.result) == (oncelog.StepState.DONE, {"id": 1})


def test_a_dead_owner_does_not_block_a_decision(store_url: str, tmp_path: Path) -> None:
    """Killed inside its tool (same host): its lease has not expired, but it is gone."""
    with agent_inside_its_tool(store_url, tmp_path) as inside:
        inside.proc.kill()
        inside.proc.wait(timeout=TIMEOUT)
        done = oncelog_cli(
            "resolve", "live", "charge", "not_done", "--by", "alice", "--db", store_url
        )
        assert done.returncode == 0, done.stderr
    with oncelog.open(store_url) as ledger:
        [entry] = resolved_entries(ledger, "live")
        assert "forced" not in entry


def test_an_expired_lease_does_not_block_a_decision(store_url: str) -> None:
    from oncelog.stores import open_store

    store = open_store(store_url)
    try:
        lease, _ = store.acquire(
            "r", owner="elsewhere|1|1|x", ttl=0.05, plan=None, replace_plan=False, create=True,
            owner_is_dead=lambda owner: False,
        )  # fmt: skip
        effect = oncelog.StepType.EFFECT
        step = oncelog.stores.NewStep(0, "a", effect, "t", "create", "k", "h", "{}")
        store.write_intent(lease, step, None)
        deadline = time.monotonic() + TIMEOUT
        while True:  # expiry is judged by the store's clock: ask it, do not sleep a guess
            try:
                store.resolve("r", "a", oncelog.Resolution.NOT_DONE, result_json=None,
                              by="alice", note=None)  # fmt: skip
                break
            except oncelog.RunLeased:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert store.steps("r", 0, 1)[0].state is oncelog.StepState.NOT_DONE
    finally:
        store.close()


# -- done without a result -----------------------------------------------------------------


@dataclass
class Charges:
    calls: list[str]

    def tool(self, ledger: oncelog.Ledger) -> oncelog.Tool[..., Any]:
        @ledger.tool(kind="create", name="charge")
        def charge(cents: int, *, idempotency_key: str) -> Any:
            self.calls.append(idempotency_key)
            raise TimeoutError("no answer")

        return charge


def in_doubt(ledger: oncelog.Ledger, run_id: str = "r") -> oncelog.Tool[..., Any]:
    """A run halted on a charge whose outcome is unknown."""
    charge = Charges([]).tool(ledger)
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run(run_id) as run:
        run.effect("charge", charge, 500)
    return charge


def test_done_without_a_result_is_refused(ledger: oncelog.Ledger) -> None:
    in_doubt(ledger)
    with pytest.raises(oncelog.InvalidResolution) as refused:
        ledger.resolve("r", "charge", "done", by="alice")
    assert "NO_RESULT" in refused.value.message
    assert (refused.value.run_id, refused.value.step_id) == ("r", "charge")
    with pytest.raises(oncelog.InvalidResolution):
        ledger.resolve("r", "charge", "abandon", by="alice", result={"id": 1})
    assert ledger.steps("r")[0].state is oncelog.StepState.UNKNOWN
    assert resolved_entries(ledger, "r") == []


def test_no_result_reaches_the_agent_as_no_result_not_none(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        charge = in_doubt(ledger)
        in_doubt(ledger, "r-none")
        ledger.resolve("r", "charge", "done", by="alice", result=oncelog.NO_RESULT)
        ledger.resolve("r-none", "charge", "done", by="alice", result=None)
        [entry] = resolved_entries(ledger, "r")
        assert entry["no_result"] is True
        assert "no_result" not in resolved_entries(ledger, "r-none")[0]
    for _ in range(2):  # a new process each time: replay
        with oncelog.open(store_url) as ledger:
            with ledger.run("r") as run:
                got = run.effect("charge", charge, 500)
                assert got is oncelog.NO_RESULT
                assert not got
                with pytest.raises(oncelog.UnserializableValue) as passed_on:
                    run.effect("receipt", charge, got)
                assert "NO_RESULT" in passed_on.value.message
            with ledger.run("r-none") as run:
                assert run.effect("charge", charge, 500) is None
            assert ledger.steps("r")[0].result is oncelog.NO_RESULT
            assert ledger.steps("r-none")[0].result is None
    assert pickle.loads(pickle.dumps(oncelog.NO_RESULT)) is oncelog.NO_RESULT
    assert repr(oncelog.NO_RESULT) == "oncelog.NO_RESULT"


def test_the_cli_needs_a_result_or_no_result_for_done(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        in_doubt(ledger)
    base = ("resolve", "r", "charge")
    for argv, message in [
        ((*base, "done", "--by", "a"), "needs --result"),
        ((*base, "done", "--by", "a", "--result", "1", "--no-result"), "not both"),
        ((*base, "not_done", "--by", "a", "--result", "1"), "'done' only"),
        ((*base, "abandon", "--by", "a", "--no-result"), "'done' only"),
    ]:
        refused = oncelog_cli(*argv, "--db", store_url)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr
    with oncelog.open(store_url) as ledger:
        assert ledger.steps("r")[0].state is oncelog.StepState.UNKNOWN
    done = oncelog_cli(*base, "done", "--by", "a", "--no-result", "--db", store_url)
    assert done.returncode == 0, done.stderr
    shown = oncelog_cli("show", "r", "--db", store_url)
    assert "NO_RESULT" in shown.stdout
    with oncelog.open(store_url) as ledger:
        assert ledger.steps("r")[0].result is oncelog.NO_RESULT


@pytest.mark.parametrize(("given", "forged"), [(oncelog.NO_RESULT, "null"), (None, None)])
def test_verify_tells_no_result_from_a_recorded_null(
    db_path: str, given: Any, forged: str | None
) -> None:
    """``result`` null in the row means NO_RESULT only if the journal says so: an edit
    from one to the other changes what the agent gets, and ``verify`` reports it."""
    with oncelog.open(db_path) as ledger:
        in_doubt(ledger)
        ledger.resolve("r", "charge", "done", by="alice", result=given)
        assert ledger.verify().ok
        with closing(sqlite3.connect(db_path)) as db:
            db.execute("UPDATE steps SET result = ? WHERE run_id = 'r'", (forged,))
            db.commit()
        problems = verify_journal(ledger.store).problems
    assert [p.kind for p in problems] == ["state"]
    assert "result" in problems[0].message


# -- a decision names the attempt it was made on -------------------------------------------


def second_attempt_in_doubt(ledger: oncelog.Ledger) -> None:
    """Attempt 1 in doubt, resolved not_done by alice; attempt 2 in doubt too."""
    charge = in_doubt(ledger)
    ledger.resolve("r", "charge", "not_done", by="alice", attempt=1)
    with pytest.raises(oncelog.AmbiguousOutcome) as again, ledger.run("r") as run:
        run.effect("charge", charge, 500)
    assert again.value.attempt == 2
    assert pickle.loads(pickle.dumps(again.value)).attempt == 2
    assert "--attempt 2" in again.value.message


def test_a_decision_on_an_attempt_the_step_moved_past_is_refused(ledger: oncelog.Ledger) -> None:
    second_attempt_in_doubt(ledger)
    before = ledger.journal("r")
    with pytest.raises(oncelog.AttemptMismatch) as refused:
        ledger.resolve("r", "charge", "not_done", by="bob", attempt=1)
    assert "attempt 2 now (unknown)" in refused.value.message
    assert refused.value.exit_code == 6
    assert ledger.journal("r") == before
    ledger.resolve("r", "charge", "abandon", by="bob", attempt=2)
    assert [e.get("attempt") for e in resolved_entries(ledger, "r")] == [1, 2]
    assert ledger.verify().ok


def test_a_correction_names_the_attempt_whose_decision_it_replaces(
    ledger: oncelog.Ledger,
) -> None:
    second_attempt_in_doubt(ledger)
    ledger.resolve("r", "charge", "abandon", by="carol", attempt=2)
    before = ledger.journal("r")
    with pytest.raises(oncelog.AttemptMismatch):  # bob corrects what alice decided on 1
        ledger.resolve("r", "charge", "done", by="bob", result={}, correct=True, attempt=1)
    assert ledger.journal("r") == before
    ledger.resolve("r", "charge", "done", by="bob", result={}, correct=True, attempt=2)
    assert ledger.steps("r")[0].state is oncelog.StepState.DONE
    assert ledger.verify().ok


@pytest.mark.parametrize("attempt", [0, -1, True, 2.0, "2"])
def test_an_attempt_that_is_not_a_count_from_one_is_refused(
    ledger: oncelog.Ledger, attempt: Any
) -> None:
    in_doubt(ledger)
    with pytest.raises(oncelog.InvalidResolution) as refused:
        ledger.resolve("r", "charge", "not_done", by="alice", attempt=attempt)
    assert not isinstance(refused.value, oncelog.AttemptMismatch)
    assert resolved_entries(ledger, "r") == []


def test_the_cli_without_an_attempt_decides_a_first_attempt_only(store_url: str) -> None:
    def typed(*words: str) -> subprocess.CompletedProcess[str]:
        return oncelog_cli("resolve", "r", "charge", *words, "--by", "al", "--db", store_url)

    with oncelog.open(store_url) as ledger:
        in_doubt(ledger)
    assert typed("not_done").returncode == 0
    with oncelog.open(store_url) as ledger:
        run_again_into_doubt(ledger)
        before = ledger.journal("r")
    refused = typed("done", "--text", "sent ok")
    assert refused.returncode == 6, refused.stderr
    pasted = "oncelog resolve r charge done --by al --text 'sent ok' --attempt 2"
    assert f"{pasted} --db {shlex.quote(store_url)}" in refused.stderr
    with oncelog.open(store_url) as ledger:
        assert ledger.journal("r") == before
        ledger.resolve("r", "charge", "abandon", by="bo", attempt=2)
        before = ledger.journal("r")
    refused = typed("not_done", "--correct")
    assert "oncelog resolve r charge not_done --by al --correct --attempt 2" in refused.stderr
    settled = typed("not_done")  # nothing to name: says who settled it
    assert settled.returncode == 6, settled.stderr
    assert "AlreadyResolved: step 'charge' of run r is not in doubt: bo" in settled.stderr
    with oncelog.open(store_url) as ledger:
        assert ledger.journal("r") == before


def run_again_into_doubt(ledger: oncelog.Ledger) -> None:
    """The run of ``in_doubt``, resolved not_done, started again: attempt 2 in doubt."""
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("charge", Charges([]).tool(ledger), 500)
