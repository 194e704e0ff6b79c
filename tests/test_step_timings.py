"""A step's duration is its provider's time: a step whose outcome a person decided, or a
probe found after a restart, shows the wait apart, never as the call's duration
(``oncelog show``, its JSON, the console's run page)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from click.testing import CliRunner

import oncelog
from oncelog.cli import cli
from oncelog.display import step_timings

from .support.console_client import Person, console_client
from .support.flaky_agent import flaky


def shown_json(store_url: str, run_id: str) -> dict[str, dict[str, object]]:
    result = CliRunner().invoke(cli, ["show", run_id, "--json", "--db", store_url])
    assert result.exit_code == 0, result.output
    return {s["step_id"]: s for s in json.loads(result.output)["steps"]}


def killed_after_the_call(store_url: str, tmp_path: Path, *options: str) -> None:
    code, out = flaky(store_url, tmp_path / "tries", *options, crash_at="after_call")
    assert code == -signal.SIGKILL, out


def test_a_resolved_step_shows_the_wait_for_a_person_apart(store_url: str, tmp_path: Path) -> None:
    killed_after_the_call(store_url, tmp_path, "--kind", "create")
    with oncelog.open(store_url, create=False) as ledger:
        ledger.resolve("r", "charge", "done", by="alice", result={"id": "ch_1"})
    code, out = flaky(store_url, tmp_path / "tries", "--kind", "create")
    assert code == 0, out
    step = shown_json(store_url, "r")["charge"]
    assert (step["call_seconds"], step["settled_by"]) == (None, "resolved by alice")
    assert isinstance(step["waited_seconds"], float)
    result = CliRunner().invoke(cli, ["show", "r", "--db", store_url])
    assert "call not timed; resolved by alice " in result.output
    assert " ms\n" not in result.output.split("\n       arguments")[0]


def test_a_probed_step_shows_the_wait_for_a_restart_apart(store_url: str, tmp_path: Path) -> None:
    killed_after_the_call(store_url, tmp_path, "--probe")
    code, out = flaky(store_url, tmp_path / "tries", "--probe")
    assert code == 0, out
    step = shown_json(store_url, "r")["charge"]
    assert (step["call_seconds"], step["settled_by"]) == (None, "found by its probe")


def test_a_step_sent_again_after_not_done_is_timed_by_its_call(
    store_url: str, tmp_path: Path
) -> None:
    killed_after_the_call(store_url, tmp_path, "--kind", "create")
    with oncelog.open(store_url, create=False) as ledger:
        ledger.resolve("r", "charge", "not_done", by="alice")
    code, out = flaky(store_url, tmp_path / "tries", "--kind", "create")
    assert code == 0, out
    step = shown_json(store_url, "r")["charge"]
    assert isinstance(step["call_seconds"], float)
    assert (step["waited_seconds"], step["settled_by"]) == (None, None)


def test_a_step_its_process_recorded_is_timed_by_its_call(ledger: oncelog.Ledger) -> None:
    with ledger.run("t1") as run:
        run.read("look", lambda: 1)
    [timing] = step_timings(ledger.steps("t1"), ledger.journal("t1")).values()
    assert timing.call is not None
    assert timing.described().endswith(" ms")


def test_the_console_run_page_shows_the_wait_apart(db_path: str, tmp_path: Path) -> None:
    killed_after_the_call(db_path, tmp_path, "--kind", "create")
    with oncelog.open(db_path, create=False) as ledger:
        ledger.resolve("r", "charge", "done", by="alice", result={"id": "ch_1"})
        with console_client(ledger) as person:
            page = _run_page(person)
    assert "call not timed; resolved by alice " in page
    assert "is not the provider's time" in page


def _run_page(person: Person) -> str:
    got = person.get("/runs/r")
    assert got.status_code == 200
    return got.text
