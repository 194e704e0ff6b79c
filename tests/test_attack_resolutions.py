"""Attacks on a person's decision about an effect in doubt: a decision made while looking at
an older attempt must not be taken for a decision on the attempt in doubt now.

The agent (``attack_agents/flaky.py``) has one payment whose tool writes every attempt to a
tries file before anything else: what the provider saw, not what the ledger says. It is
SIGKILLed just after the call, so each attempt it makes is left in doubt. Person A
resolves attempt 1 ``not_done``; attempt 2 is performed and left in doubt too; person B
then submits the ``not_done`` they prepared while looking at attempt 1, from the command
``oncelog unknown`` printed or from the console's form. It must be refused, and the
payment performed twice, not three times.
"""

from __future__ import annotations

import html
import re
import shlex
import signal
import subprocess
from pathlib import Path

import oncelog
from oncelog._exit_codes import EXIT_CONFLICT

from .support.console_client import console_client, store_state
from .support.flaky_agent import flaky, tries_made
from .support.launch import run_python

HIDDEN_FIELD = re.compile(r'<input type="hidden" name="(\w+)" value="([^"]*)">')


def decide_line(store_url: str) -> str:
    """The ``decide:`` commands ``oncelog unknown`` prints for the one effect in doubt, one
    per decision, each on its line."""
    lines = cli(store_url, "unknown").stdout.splitlines()
    [start] = [i for i, line in enumerate(lines) if "decide:" in line]
    return "\n".join(
        [lines[start].split("decide:", 1)[1].strip()]
        + [line.strip() for line in lines[start + 1 : start + 3]]
    )


def pasted(line: str, resolution: str, by: str) -> list[str]:
    """The printed command of ``resolution`` as a person pastes it, with their name in."""
    [words] = [
        w for w in (shlex.split(one, comments=True) for one in line.splitlines())
        if w[4] == resolution
    ]  # fmt: skip
    assert words[:2] == ["oncelog", "resolve"], line
    return [by if word == "NAME" else word for word in words[1:]]


def cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "oncelog", *args, "--db", store_url)


def form_fields(page: str, step_id: str) -> dict[str, str]:
    """The hidden fields of the resolve form for ``step_id`` on a console page: what the
    page sends back when the person submits it, however long they looked at it."""
    for form in page.split("<form")[1:]:
        fields = {name: html.unescape(value) for name, value in HIDDEN_FIELD.findall(form)}
        if fields.get("step_id") == step_id:
            fields.pop("csrf")
            return fields
    raise AssertionError(f"no resolve form for {step_id!r}")


def attempt_in_doubt(store_url: str, tries: Path, performed: int) -> oncelog.StepRecord:
    """Start the agent, killed just after the payment's call: the provider has seen
    ``performed`` attempts, and the latest is in doubt."""
    code, out = flaky(store_url, tries, crash_at="after_call@charge")
    assert code == -signal.SIGKILL, out
    assert len(tries_made(tries)) == performed
    with oncelog.open(store_url) as ledger:
        [step] = ledger.steps("r")
    assert (step.state, step.attempts) == (oncelog.StepState.IN_FLIGHT, performed)
    return step


def settle_attempt_one(store_url: str, tries: Path) -> None:
    """Attempt 1 in doubt, resolved ``not_done`` by person A from the printed command."""
    attempt_in_doubt(store_url, tries, 1)
    done = cli(store_url, *pasted(decide_line(store_url), "not_done", "person-a"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_cli_decision_made_on_an_older_attempt_is_refused(store_url: str, tmp_path: Path) -> None:
    tries = tmp_path / "tries"
    attempt_in_doubt(store_url, tries, 1)
    seen_by_b = decide_line(store_url)  # person B reads attempt 1, and decides later
    done = cli(store_url, *pasted(decide_line(store_url), "not_done", "person-a"))
    assert done.returncode == 0, done.stdout + done.stderr
    attempt_in_doubt(store_url, tries, 2)
    with oncelog.open(store_url) as ledger:
        before = ledger.journal(limit=1_000_000)

    late = cli(store_url, *pasted(seen_by_b, "not_done", "person-b"))

    assert late.returncode == EXIT_CONFLICT, late.stdout + late.stderr
    assert "attempt 2" in late.stderr, late.stderr
    with oncelog.open(store_url) as ledger:
        assert ledger.journal(limit=1_000_000) == before
    code, out = flaky(store_url, tries)
    assert code == oncelog.EXIT_HALTED, out
    assert len(tries_made(tries)) == 2


def test_a_cli_decision_naming_no_attempt_is_refused_with_the_command_to_paste(
    store_url: str, tmp_path: Path
) -> None:
    tries = tmp_path / "tries"
    settle_attempt_one(store_url, tries)
    attempt_in_doubt(store_url, tries, 2)
    with oncelog.open(store_url) as ledger:
        before = ledger.journal(limit=1_000_000)

    typed = cli(store_url, "resolve", "r", "charge", "not_done", "--by", "tired")

    assert typed.returncode == EXIT_CONFLICT, typed.stdout + typed.stderr
    assert "attempt 2 now (in_flight)" in typed.stderr, typed.stderr
    assert "oncelog resolve r charge not_done --by tired --attempt 2" in typed.stderr
    with oncelog.open(store_url) as ledger:
        assert ledger.journal(limit=1_000_000) == before
    code, out = flaky(store_url, tries)
    assert code == oncelog.EXIT_HALTED, out
    assert len(tries_made(tries)) == 2


def test_a_console_form_shown_for_an_older_attempt_is_refused(
    store_url: str, tmp_path: Path
) -> None:
    tries = tmp_path / "tries"
    attempt_in_doubt(store_url, tries, 1)
    with oncelog.open(store_url) as ledger, console_client(ledger) as person_b:
        seen = form_fields(person_b.get("/unknown").text, "charge")
        done = cli(store_url, *pasted(decide_line(store_url), "not_done", "person-a"))
        assert done.returncode == 0, done.stdout + done.stderr
        attempt_in_doubt(store_url, tries, 2)
        before = store_state(ledger)

        late = person_b.post(
            "/unknown/resolve", {**seen, "resolution": "not_done", "by": "person-b"}
        )

        assert late.status_code == 409, late.text
        assert "attempt 2" in late.text
        assert store_state(ledger) == before
    code, out = flaky(store_url, tries)
    assert code == oncelog.EXIT_HALTED, out
    assert len(tries_made(tries)) == 2


def test_a_console_form_without_its_attempt_is_refused(store_url: str, tmp_path: Path) -> None:
    tries = tmp_path / "tries"
    settle_attempt_one(store_url, tries)
    attempt_in_doubt(store_url, tries, 2)
    with oncelog.open(store_url) as ledger, console_client(ledger) as person:
        fields = form_fields(person.get("/unknown").text, "charge")
        fields.pop("attempt", None)  # a form from an older console, or forged
        before = store_state(ledger)
        sent = person.post("/unknown/resolve", {**fields, "resolution": "not_done", "by": "person"})
        assert sent.status_code == 400, sent.text
        assert store_state(ledger) == before
    assert len(tries_made(tries)) == 2
