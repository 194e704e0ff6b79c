"""Attack: ids and text an agent chooses reach an operator's terminal and the console.
An ESC sequence, a carriage return, a right-to-left override or a newline in a run id
must be shown escaped by ``oncelog runs``, ``unknown``, ``show``, ``halts`` and
``approvals`` (a newline must not forge a row); and a console link to a run whose id has
``..`` or ``/`` segments must open that exact run, never another. The runs are made by
the agent in its own process; what reached the provider is read from its tries file."""

from __future__ import annotations

import html
import re
import signal
from pathlib import Path
from urllib.parse import urljoin

import pytest

import oncelog
from oncelog.display import printable

from .support.console_client import BASE, console_client
from .support.flaky_agent import flaky, tries_made
from .support.launch import run_python

FORGED = "x\nvictim                         completed      1 steps  2026-01-01 00:00:00  "
HOSTILE = [FORGED, "\x1b[2J\x1b]0;pwned\x07cleared", "a\rb", "admin\u202egpj.exe", "\x9bq"]
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _cli(store_url: str, command: str, *args: str) -> str:
    done = run_python("-m", "oncelog", command, "--db", store_url, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("run_id", HOSTILE)
def test_ids_reach_the_terminal_escaped_and_never_forge_a_row(
    store_url: str, tmp_path: Path, run_id: str
) -> None:
    tries = tmp_path / "tries"
    env = {"ONCELOG_RUN_ID": run_id}
    code, out = flaky(store_url, tries, "--approval", "--run-id-from-env", **env)
    assert code == oncelog.EXIT_WAITING, out
    assert not CONTROLS.search(out.replace("\n", ""))
    approvals = _cli(store_url, "approvals")
    with oncelog.open(store_url, create=False) as ledger:
        ledger.approve(run_id, "charge", by="alice")
        ledger.halt("looking", by="ops", agent=run_id, ahead=True)
    code, out = flaky(
        store_url, tries, "--approval", "--run-id-from-env", crash_at="after_call@charge", **env
    )
    assert code == -signal.SIGKILL, out
    assert len(tries_made(tries)) == 1
    listed = {
        "runs": _cli(store_url, "runs"),
        "unknown": _cli(store_url, "unknown"),
        "show": _cli(store_url, "show", "--", run_id),
        "halts": _cli(store_url, "halts"),
        "approvals": approvals,
    }
    for command, text in listed.items():
        assert not CONTROLS.search(text), (command, text)
        assert "\nvictim " not in text, (command, text)
    assert len(listed["runs"].splitlines()) == 1, listed["runs"]


@pytest.mark.parametrize("run_id", ["other/../victim", "a/b", "other/./../victim", "x?y#z"])
def test_a_console_link_opens_exactly_its_run(store_url: str, tmp_path: Path, run_id: str) -> None:
    """The run page's link, followed as a browser does (dot segments resolved), shows the
    run it names; the run a ``..`` would lead to is never shown in its place."""
    for made in (run_id, "victim", "other"):
        code, out = flaky(store_url, tmp_path / made.replace("/", "_"), "--run-id-from-env",
                          ONCELOG_RUN_ID=made)  # fmt: skip
        assert code == 0, out
    with oncelog.open(store_url, create=False) as ledger, console_client(ledger) as person:
        page = person.get("/runs").text
        hrefs = re.findall(r'href="(/runs/[^"]*)"', page)
        opened = {}
        for href in hrefs:
            resolved = urljoin(BASE + "/runs", href.replace("&amp;", "&"))
            response = person.get(resolved)
            assert response.status_code == 200, (href, response.status_code)
            [title] = re.findall(r"<h1>Run <code>(.*?)</code></h1>", response.text, re.S)
            opened[href] = html.unescape(title)
        assert sorted(opened.values()) == sorted(["other", "victim", run_id])


def test_printable_escapes_only_what_does_not_show() -> None:
    assert printable("plain é 😀 a\\b") == "plain é 😀 a\\b"
    assert printable("a\nb\r\t\x1b[2J\x7f\x9b\u202e\u2066\u200f") == (
        "a\\nb\\r\\t\\x1b[2J\\x7f\\x9b\\u202e\\u2066\\u200f"
    )
