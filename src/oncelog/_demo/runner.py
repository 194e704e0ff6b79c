"""Runs the demo's three scenarios under a supervisor loop, as Kubernetes would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import oncelog

EXIT_MEANING = {0: "completed", 3: "halted: a person must act", -9: "killed (SIGKILL)"}


@dataclass(frozen=True)
class Scenario:
    title: str
    ticket: str
    mode: str
    crash_env: dict[str, str]


SCENARIOS = (
    Scenario(
        "no ledger, killed after the email", "ticket-1", "plain", {"DEMO_KILL_AFTER_EMAIL": "1"}
    ),
    Scenario(
        "oncelog, killed after the email was recorded",
        "ticket-2",
        "guarded",
        {"ONCELOG_CRASH_AT": "after_outcome_commit@email"},
    ),
    Scenario(
        "oncelog, killed after the provider's OK, before it was recorded",
        "ticket-3",
        "guarded",
        {"ONCELOG_CRASH_AT": "after_call@email"},
    ),
)


@contextmanager
def mailer(folder: Path) -> Iterator[str]:
    port_file = folder / "mailer.port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oncelog._demo.mailer",
            str(folder / "outbox.jsonl"),
            str(port_file),
        ],
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the demo's email provider did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def emails_for(url: str, ticket: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/emails", timeout=10) as answer:
        sent: list[dict[str, Any]] = json.loads(answer.read())["data"]
    return [m for m in sent if str(m.get("subject", "")).startswith(f"{ticket}:")]


def operator(ledger_path: str, url: str, say: Callable[[str], None]) -> None:
    """What a person does with an effect in doubt: ask the provider, then decide."""
    with oncelog.open(ledger_path) as ledger:
        for step in ledger.in_doubt():
            with urllib.request.urlopen(f"{url}/emails?key={step.key}", timeout=10) as answer:
                found = json.loads(answer.read())["data"]
            if found:
                say(
                    f"operator: provider has {found[0]['id']} for key {step.key}; resolving as done"
                )
                ledger.resolve(
                    step.run_id,
                    step.step_id,
                    "done",
                    result=found[0],
                    by="demo operator",
                    note="found at the provider",
                )
            else:
                say(f"operator: provider has nothing for key {step.key}; resolving as not done")
                ledger.resolve(step.run_id, step.step_id, "not_done", by="demo operator")


def supervise(scenario: Scenario, ledger_path: str, url: str, say: Callable[[str], None]) -> None:
    """Restart the agent until it completes, as a Job controller or crash loop would."""
    for attempt in range(1, 6):
        env = {k: v for k, v in os.environ.items() if k != "ONCELOG_CRASH_AT"}
        if attempt == 1:
            env.update(scenario.crash_env)
        code = subprocess.run(
            [
                sys.executable,
                "-m",
                "oncelog._demo.agent",
                scenario.mode,
                ledger_path,
                url,
                scenario.ticket,
            ],
            env=env,
            stderr=subprocess.DEVNULL,
            check=False,
        ).returncode
        say(f"attempt {attempt}: exit {code} ({EXIT_MEANING.get(code, 'error')})")
        if code == 0:
            return
        if code == 3:
            operator(ledger_path, url, say)
    raise RuntimeError(f"{scenario.ticket} did not complete in 5 attempts")


def timeline(ledger_path: str, ticket: str) -> list[str]:
    with oncelog.open(ledger_path) as ledger:
        rows = [f"  {'#':>2}  {'step':<9} {'type':<7} {'state':<6} {'attempts':>8}  key"]
        for s in ledger.steps(ticket):
            rows.append(
                f"  {s.seq:>2}  {s.step_id:<9} {s.type.value:<7} {s.state.value:<6} "
                f"{s.attempts:>8}  {s.key}"
            )
        rows += [
            f"  journal: {e.event}" + (f" by {e.data['by']}" if "by" in e.data else "")
            for e in ledger.journal(ticket)
            if e.event in ("unknown", "resolved")
        ]
        return rows


def run_demo(folder: Path, say: Callable[[str], None]) -> dict[str, int]:
    """Run every scenario; return emails sent per ticket, as the provider counts them."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ledger_path = str(folder / "ledger.db")
    counts: dict[str, int] = {}
    with mailer(folder) as url:
        for scenario in SCENARIOS:
            say(f"\n== {scenario.ticket}: {scenario.title}")
            supervise(scenario, ledger_path, url, say)
            counts[scenario.ticket] = len(emails_for(url, scenario.ticket))
            say(f"emails the customer received: {counts[scenario.ticket]}")
    say("\n== timeline of ticket-3 in the ledger")
    for row in timeline(ledger_path, "ticket-3"):
        say(row)
    return counts
