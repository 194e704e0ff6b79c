"""The public names the CLI, the queue consumers and the showcases use instead of private
modules (test_floors.py keeps them from reaching past these): the drain, ``explain``, a
key pair and ``Ledger.verify`` against an export file, canonical JSON, the default
ledger path and the crash points."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import oncelog
from oncelog.testing import CRASH_ENV, CRASH_POINTS

from .support.launch import python

# Draining cannot be undone in a process, so it is tried in a process of its own.
_DRAIN = """
import oncelog
before = (oncelog.draining(), oncelog.wait_for_drain(0.01))
oncelog.drain()
print(json.dumps([before, (oncelog.draining(), oncelog.wait_for_drain(60))]))
"""


def test_drain_is_seen_by_draining_and_wakes_a_waiter() -> None:
    done = subprocess.run(
        python("-c", "import json\n" + _DRAIN), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[False, False], [True, True]]


def test_explain_prints_the_error_and_where_it_happened() -> None:
    stop = oncelog.AmbiguousOutcome("it may have happened", run_id="r\x1b[2J", step_id="s")
    assert oncelog.explain(stop) == (
        "AmbiguousOutcome: it may have happened\n  run: r\\x1b[2J\n  step: s"
    )


def fill(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="create", name="send")
    def send(n: int, *, idempotency_key: str) -> int:
        return n

    with ledger.run("r") as run:
        run.effect("s", send, 1)


def test_a_new_key_pair_signs_and_an_export_file_is_verified_against(tmp_path: Path) -> None:
    pytest.importorskip("cryptography", reason="the signing extra is not installed")
    private, public = oncelog.new_key_pair(str(tmp_path / "keys"))
    assert (private.suffix, public.suffix, oct(private.stat().st_mode & 0o777)) == (
        ".key", ".pub", "0o600",
    )  # fmt: skip
    path = str(tmp_path / "ledger.db")
    exported = tmp_path / "elsewhere.jsonl"
    with oncelog.open(path, signing_key=private) as ledger:
        fill(ledger)
        exported.write_text("\n".join(ledger.export()) + "\n")
        for against in (exported, str(exported), ledger.checkpoints("r")):
            report = ledger.verify(public_keys=[public], against=against)
            assert report.ok, report.problems
            assert report.signatures_checked
            assert report.checkpoints == 2  # the run's own, and the export's copy
        exported.write_text("not an export line\n")
        with pytest.raises(oncelog.ConfigurationError, match=r"elsewhere\.jsonl:1"):
            ledger.verify(against=exported)


def test_canonical_json_ignores_key_order_and_refuses_what_json_would_change() -> None:
    assert oncelog.canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'
    with pytest.raises(oncelog.UnserializableValue, match="message body"):
        oncelog.canonical_json({"x": float("nan")}, what="message body")


def test_the_default_path_and_the_crash_points() -> None:
    assert os.path.join(".oncelog", "ledger.db") == oncelog.DEFAULT_PATH
    assert CRASH_ENV == "ONCELOG_CRASH_AT"
    assert CRASH_POINTS == (
        "before_intent_commit", "after_intent_commit", "after_call", "before_outcome_commit",
        "after_outcome_commit",
    )  # fmt: skip
