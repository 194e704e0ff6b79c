"""Subjects and holds at the console, against real ledgers (SQLite and PostgreSQL): the run
page names each step's subject and, for a step that took another run's result, the run
and step that did it; the unknown page the subject an effect in doubt holds; the
"Subjects & holds" page lists both, and a person releases a hold there, refused while its
holder lives unless forced, journalled. The blocked hold is left by a real agent process
SIGKILLed under it (``hold_agents/contender.py``), whose provider-side log counts what it
did."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

import oncelog
from oncelog.console._app import run_path

from .hold_agents import fenced_resource
from .support.console_client import BASE, console_client, store_state
from .support.launch import environment, python

FOREIGN = "http://evil.example"
CONTENDER = Path(__file__).with_name("hold_agents") / "contender.py"
ORDER = "<b>o-1</b>"  # agent-written text in a subject: shown as text, never markup
SUBJECT = f'["refund","{ORDER}"]'
MAIL_SUBJECT = '["welcome","a@example.com"]'
LIVE = ("host", "<i>db-2</i>")
LIVE_NAME = '["host","<i>db-2</i>"]'
DEAD_NAME = '["host","db-1"]'  # the contender's resource


def refunds(ledger: oncelog.Ledger, calls: list[str]) -> Any:
    @ledger.tool(kind="payment", name="refund", once_per=lambda order: ("refund", order),
                 once_for=3600)  # fmt: skip
    def refund(order: str, *, idempotency_key: str) -> dict[str, str]:
        calls.append(order)
        return {"refund": f"re_{len(calls)}"}

    return refund


def welcome_in_doubt(ledger: oncelog.Ledger) -> None:
    """A run halted on a welcome email, keyed by its address, whose provider never answered."""

    @ledger.tool(kind="create", name="welcome", once_per=lambda to: ("welcome", to))
    def welcome(to: str, *, idempotency_key: str) -> None:
        raise ConnectionError("no answer from the mail provider")

    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r-welcome") as run:
        run.effect("welcome", welcome, "a@example.com")


@pytest.fixture
def subjects(ledger: oncelog.Ledger) -> list[str]:
    """Run ``r-first`` refunds the order; ``r-<second>`` asks again and takes its result."""
    calls: list[str] = []
    refund = refunds(ledger, calls)
    with ledger.run("r-first") as run:
        run.effect("refund", refund, ORDER)
    with ledger.run("r-<second>") as run:
        run.effect("refund-again", refund, ORDER)
    welcome_in_doubt(ledger)
    return calls


def killed_holder(store_url: str, log: Path) -> None:
    """A contender SIGKILLed inside its first action under the hold on ``["host","db-1"]``:
    its effect is in doubt, its lease lapses, and the hold stays blocked."""
    argv = python(CONTENDER, store_url, "r-dead", log, "--holds", "1", "--lease-ttl", "0.5",
                  "--kind", "create", "--die-in-tool")  # fmt: skip
    died = subprocess.run(argv, env=environment(), capture_output=True, timeout=60)
    assert died.returncode == -signal.SIGKILL, died.stderr
    time.sleep(1.0)  # the dead holder's lease expires by the store's clock


def contender(store_url: str, run_id: str, log: Path) -> int:
    argv = python(CONTENDER, store_url, run_id, log, "--holds", "1", "--wait", "0")
    return subprocess.run(argv, env=environment(), capture_output=True, timeout=60).returncode


def release_form(resource: str, by: str, why: str, **more: str) -> dict[str, str]:
    return {"resource": resource, "by": by, "why": why, **more}


def test_the_run_page_names_each_steps_subject_and_the_run_that_did_it(
    ledger: oncelog.Ledger, subjects: list[str]
) -> None:
    assert subjects == [ORDER]  # refunded once, for both runs
    with console_client(ledger) as person:
        second = person.get(run_path("r-<second>")).text
        first = person.get(run_path("r-first")).text
    shown = escape(SUBJECT)
    assert "<b>" not in second + first
    assert f"subject <code>{shown}</code>: done by run" in second
    # A link to the run that did it, routed by its exact id, to the step that did it.
    assert f'<a href="{run_path("r-first")}#step-0">r-first</a>, step refund;' in second
    assert f"subject <code>{shown}</code>, held by this step until" in first


def test_a_step_whose_claim_moved_on_names_the_run_in_the_journals_words_without_a_link(
    ledger: oncelog.Ledger,
) -> None:
    """Once a done claim expires (``once_for``) and another run claims the subject, the
    step that took the first run's result is not linked to the new holder."""
    calls: list[str] = []

    @ledger.tool(kind="payment", name="refund", once_per=lambda order: ("refund", order),
                 once_for=0.5)  # fmt: skip
    def refund(order: str, *, idempotency_key: str) -> str:
        calls.append(order)
        return f"re_{len(calls)}"

    with ledger.run("r-a") as run:
        run.effect("refund", refund, "o-1")
    with ledger.run("r-b") as run:
        run.effect("refund", refund, "o-1")
    time.sleep(0.7)  # the claim's expiry, by the store's clock, is the subject here
    with ledger.run("r-c") as run:
        run.effect("refund", refund, "o-1")
    assert calls == ["o-1", "o-1"]
    with console_client(ledger) as person:
        page = person.get("/runs/r-b").text
    said = '<p class="key subject-taken">the subject [&#34;refund&#34;,&#34;o-1&#34;] was done by'
    assert f"{said} run &#39;r-a&#39;, step &#39;refund&#39;" in page  # the journal's words
    assert 'href="/runs/r-c' not in page
    assert 'href="/runs/r-a' not in page  # no link made out of text


def test_the_unknown_page_shows_the_subject_an_effect_in_doubt_holds(
    ledger: oncelog.Ledger, subjects: list[str]
) -> None:
    with console_client(ledger) as person:
        unknown = person.get("/unknown").text
        run = person.get(run_path("r-welcome")).text
    said = escape(MAIL_SUBJECT)
    assert f"<dt>Subject</dt><dd><code>{said}</code>, held by this effect" in unknown
    assert f"subject <code>{said}</code>: no other run acts on it until this is decided" in run


def test_the_subjects_and_holds_page_lists_claims_and_holds(
    ledger: oncelog.Ledger, subjects: list[str]
) -> None:
    with ledger.run("r-<holder>") as run, run.hold(LIVE), console_client(ledger) as person:
        page = person.get("/holds").text
    for markup in ("<b>", "<i>", "<second>", "<holder>"):
        assert markup not in page
    assert 'aria-current="page">Subjects &amp; holds</a>' in page
    [in_doubt, done] = page.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:2]
    [claim] = [c for c in ledger.subjects() if c.run_id == "r-first"]
    assert claim.expires_at is not None
    assert escape(SUBJECT) in done
    assert f'<a href="{run_path("r-first")}#step-0">r-first</a> · refund' in done
    assert "state-done" in done
    assert "UTC" in done.split("state-done")[1]  # claimed at, and expires an hour later
    assert escape(MAIL_SUBJECT) in in_doubt
    assert "state-unknown" in in_doubt
    assert "never" in in_doubt  # a claim in doubt never expires
    hold = page.split("<h2>Holds (1)</h2>")[1]
    assert escape(LIVE_NAME) in hold
    assert "state-hold-held" in hold
    assert f'<a href="{run_path("r-<holder>")}">r-&lt;holder&gt;</a>' in hold
    assert "<dt>Token</dt><dd>1</dd>" in hold
    assert 'action="/holds/release"' in hold
    assert f'name="resource" value="{escape(LIVE_NAME)}"' in hold


def test_a_person_releases_the_hold_a_killed_agent_left_blocked(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "resource.log"
    killed_holder(store_url, log)
    assert [(h.holder, h.state) for h in ledger.holds()] == [("r-dead", "blocked")]
    assert contender(store_url, "r-next", log) == oncelog.EXIT_HALTED  # blocked: a person frees it
    with console_client(ledger) as person:
        assert "state-hold-blocked" in person.get("/holds").text
        form = release_form(DEAD_NAME, "ann", "the host was rebuilt; nothing of it survives")
        response = person.post("/holds/release", form)
        assert (response.status_code, response.headers["location"]) == (
            303, "/holds?done=released&run=r-dead"
        )  # fmt: skip
        assert "Run r-dead: Hold released" in person.get(response.headers["location"]).text
    [hold] = ledger.holds()
    assert hold.state == "free"
    [entry] = [e.data for e in ledger.journal("r-dead") if e.event == "hold_released"]
    assert (entry["by"], entry["forced"], entry["state"]) == ("ann", None, "blocked")  # not forced
    assert contender(store_url, "r-next", log) == 0  # the next run takes it, fenced anew
    tokens = [int(e[1]) for e in fenced_resource.lines(log) if e[0] == "begin"]
    assert tokens == [1, 2, 2]  # the provider saw the dead one's action, then the next's
    assert ledger.verify().ok, ledger.verify().problems


def test_release_is_refused_while_the_holder_lives_unless_forced(
    ledger: oncelog.Ledger,
) -> None:
    with ledger.run("r-<holder>") as run, run.hold(LIVE), console_client(ledger) as person:
        before = store_state(ledger), ledger.holds()
        form = release_form(LIVE_NAME, "ann <x>", "the job <looks> stuck")
        refused = person.post("/holds/release", form)
        assert refused.status_code == 409
        assert "ResourceHeld" in refused.text
        # What the person typed is still there, escaped, for them to tick "force".
        assert 'value="ann &lt;x&gt;"' in refused.text
        assert 'value="the job &lt;looks&gt; stuck"' in refused.text
        assert (store_state(ledger), ledger.holds()) == before
        forced = person.post("/holds/release", {**form, "force": "yes"})
        assert forced.status_code == 303
        assert ledger.holds()[0].state == "free"
        again = person.post("/holds/release", {**form, "force": "yes"})
        assert again.status_code == 404  # nobody holds it now
        assert "UnknownHold" in again.text
    [entry] = [e.data for e in ledger.journal("r-<holder>") if e.event == "hold_released"]
    assert (entry["by"], entry["forced"]) == ("ann <x>", True)
    assert entry["why"] == "the job <looks> stuck"
    assert ledger.verify().ok, ledger.verify().problems


def test_a_forged_or_cross_site_release_changes_nothing(ledger: oncelog.Ledger) -> None:
    with ledger.run("r-holder") as run, run.hold(LIVE), console_client(ledger) as person:
        before = store_state(ledger), ledger.holds()
        form = release_form(LIVE_NAME, "mallory", "x", force="yes")
        for headers in ({"Origin": FOREIGN}, {"Origin": "null"}, {},
                        {"Origin": BASE, "Sec-Fetch-Site": "cross-site"}):  # fmt: skip
            assert person.post("/holds/release", form, headers=headers).status_code == 403
        for csrf in ("", "wrong"):  # same origin, without the page's token
            sent = person.client.post(
                "/holds/release", data={**form, "csrf": csrf}, headers={"Origin": BASE}
            )
            assert sent.status_code == 403
        assert (store_state(ledger), ledger.holds()) == before


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (release_form("host", "ann", "x"), "is not a hold&#39;s name"),
        (release_form('{"host": 1}', "ann", "x"), "is not a hold&#39;s name"),
        (release_form(LIVE_NAME, "ann", " "), "why is required"),
        (release_form(LIVE_NAME, "", "x"), "by is required"),
        ({"by": "ann", "why": "x"}, "resource is required"),
    ],
)
def test_a_bad_release_form_is_a_clear_error_and_changes_nothing(
    ledger: oncelog.Ledger, fields: dict[str, str], said: str
) -> None:
    with ledger.run("r-holder") as run, run.hold(LIVE), console_client(ledger) as person:
        before = store_state(ledger), ledger.holds()
        response = person.post("/holds/release", {**fields, "force": "yes"})
        assert response.status_code == 400
        assert said in response.text
        assert (store_state(ledger), ledger.holds()) == before


def test_a_ledger_with_no_subject_and_no_hold_says_so(ledger: oncelog.Ledger) -> None:
    with console_client(ledger) as person:
        page = person.get("/holds").text
    assert "No subject has been claimed." in page
    assert "No resource has been held." in page
