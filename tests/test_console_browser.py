"""The console end to end: the real ``oncelog console`` process, a real headless Chromium
(Debian's), a person logging in with the printed URL and clicking through; each decision
then read back from the ledger.

``ONCELOG_SCREENSHOTS=docs/screenshots`` saves a screenshot of each page there (off by
default, so a test run does not rewrite tracked files).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import oncelog

from .conftest import require
from .support.incidents import (
    approval_pending,
    effect_killed_in_flight,
    over_budget,
    refund_pending,
)
from .support.launch import python

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
SCREENSHOTS = os.environ.get("ONCELOG_SCREENSHOTS")


@pytest.fixture
def browser() -> Iterator[Browser]:
    require(CHROMIUM.exists(), "Debian's chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "playwright is not installed (pip install -e '.[dev]')")
        raise
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def incidents(db_path: str, tmp_path: Path) -> str:
    """A ledger with an approval pending, an effect in doubt left by a SIGKILLed agent, a
    run over its budget and an agent's daily budget."""
    with oncelog.open(db_path) as ledger:
        approval_pending(ledger, api_key="sk_live_undeclared")
        over_budget(ledger)
        ledger.set_agent_budget("mailer", oncelog.AgentBudget(calls=500, cost=20.0), by="ops")
    effect_killed_in_flight(db_path, tmp_path)
    return db_path


@pytest.fixture
def login_url(incidents: str, tmp_path: Path) -> Iterator[str]:
    """``oncelog console`` on a free port; the login URL it printed."""
    argv = python("-m", "oncelog", "console", "--db", incidents, "--port", "0")
    argv += ["--token-file", str(tmp_path / "console-token")]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    printed = process.stdout.readline() + process.stdout.readline()
    started = "\nlog in: http://127.0.0.1:" in printed
    try:
        if started:
            yield printed.split("log in: ")[1].strip()
    finally:
        process.terminate()
        rest, errors = process.communicate(timeout=30)
    assert started, f"the console did not start: {printed}{rest}{errors}"
    assert process.returncode == -signal.SIGTERM, errors  # uvicorn ends as it was asked to
    token = (tmp_path / "console-token").read_text().strip()
    # Printed once, at the start; never in a log line, whatever was requested.
    assert (printed + rest + errors).count(token) == 1


@pytest.fixture
def page(browser: Browser, login_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("console", lambda message: problems.append(message.text))
    opened.goto(login_url)
    assert opened.url.endswith("/")  # logged in, and the token left the address bar
    assert "?token" not in opened.url
    yield opened
    context.close()
    # A CSP violation, a missing file: each would show here. A 409 is the console
    # refusing a decision on purpose (a request superseded while its page was open).
    assert [p for p in problems if "status of 409 (Conflict)" not in p] == []


def go(page: Page, label: str) -> None:
    page.get_by_role("navigation").get_by_role("link", name=label).click()


def page_width(page: Page) -> int:
    """The page's laid-out width, once its stylesheet applies: measured while the
    stylesheet is still loading (a loaded machine), the phone's rules are not in force yet
    and a wide table lays out at its full width."""
    page.wait_for_load_state()
    width: int = page.evaluate("document.documentElement.scrollWidth")
    return width


def shoot(page: Page, name: str) -> None:
    if SCREENSHOTS:
        page.wait_for_load_state()  # the stylesheet too
        page.screenshot(path=str(Path(SCREENSHOTS) / f"console-{name}.png"), full_page=True)


def test_a_person_approves_a_pending_deletion(page: Page, incidents: str) -> None:
    from playwright.sync_api import expect

    expect(page.get_by_role("heading", name="Needs a person")).to_be_visible()
    shoot(page, "overview")
    go(page, "Approvals")
    request = page.locator("article", has_text="delete_account")
    expect(request).to_contain_text('"acct_1"')
    expect(request).to_contain_text("sk_live_undeclared")  # approved as seen: not masked
    shoot(page, "approvals")
    request.get_by_label("Your name").fill("alice")
    request.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text("Approved")
    with oncelog.open(incidents) as ledger:
        [approval] = ledger.approvals(None)
    assert (approval.status, approval.decided_by) == (oncelog.ApprovalStatus.APPROVED, "alice")


def test_the_button_under_a_superseded_request_approves_nothing(page: Page, incidents: str) -> None:
    from playwright.sync_api import expect

    go(page, "Approvals")
    shown = page.locator("article", has_text="delete_account")
    expect(shown).to_contain_text("sk_live_undeclared")
    with oncelog.open(incidents) as ledger:  # the agent asks again, with other arguments
        approval_pending(ledger, api_key="sk_live_other", note="x" * 30_000)
    shown.get_by_label("Your name").fill("alice")
    shown.get_by_role("button", name="Approve").click()  # the page the person read
    expect(page.get_by_role("alert")).to_contain_text("superseded")
    with oncelog.open(incidents) as ledger:
        assert [a.status for a in ledger.approvals(None)] == [
            oncelog.ApprovalStatus.PENDING, oncelog.ApprovalStatus.SUPERSEDED,
        ]  # fmt: skip
    request = page.locator("article", has_text="sk_live_other")
    expect(request).to_contain_text("only the first")
    request.locator("summary").click()  # "All the arguments": opens without JavaScript
    expect(request.locator("details pre")).to_contain_text("x" * 30_000)


def test_a_person_resolves_an_effect_left_by_a_killed_agent(page: Page, incidents: str) -> None:
    from playwright.sync_api import expect

    go(page, "Unknown effects")
    effect = page.locator("article", has_text="r-killed")
    expect(effect).to_contain_text("its outcome was never recorded")  # the recorded reason
    expect(effect).to_contain_text("send_email")
    shoot(page, "unknown")
    effect.get_by_label("Done: it happened").check()
    effect.get_by_label("Result (JSON").fill('{"id": "msg_7"}')
    effect.get_by_label("Your name").fill("bob")
    effect.get_by_label("Note").fill("found at the provider by its key")
    effect.get_by_role("button", name="Record the decision").click()
    expect(page.get_by_role("status")).to_contain_text("Decision recorded")
    with oncelog.open(incidents) as ledger:
        [step] = ledger.steps("r-killed")
        [entry] = [e for e in ledger.journal("r-killed") if e.event == "resolved"]
    assert (step.state, step.result) == (oncelog.StepState.DONE, {"id": "msg_7"})
    assert (entry.data["by"], entry.data["note"]) == ("bob", "found at the provider by its key")
    go(page, "Runs")
    page.get_by_role("link", name="r-killed").click()
    expect(page.get_by_role("heading", name="Journal")).to_be_visible()
    shoot(page, "run")


def test_a_person_flips_the_global_halt(page: Page, incidents: str) -> None:
    from playwright.sync_api import expect

    go(page, "Halts")
    page.get_by_label("Covers").select_option("global")  # the form offers one run first
    page.get_by_label("Reason").fill("incident 42: provider double-charging")
    page.get_by_label("Your name").fill("carol")
    page.get_by_role("button", name="Turn on").click()
    expect(page.get_by_role("status")).to_contain_text("Kill switch on")
    with oncelog.open(incidents) as ledger:
        [halt] = ledger.halts()
    assert (halt.scope, halt.set_by) == (oncelog.HaltScope.GLOBAL, "carol")
    shoot(page, "halts")
    switch = page.locator("article", has_text="incident 42")
    switch.get_by_label("Your name").fill("dave")
    switch.get_by_label("Why it is safe").fill("provider fixed")
    switch.get_by_role("button", name="Clear this switch").click()
    expect(page.get_by_role("status")).to_contain_text("Kill switch off")
    with oncelog.open(incidents) as ledger:
        assert ledger.halts() == []
        [cleared] = ledger.halts(active_only=False)
    assert (cleared.cleared_by, cleared.note) == ("dave", "provider fixed")
    go(page, "Budgets")
    expect(page.get_by_role("heading", name="Budgets", exact=True)).to_be_visible()
    shoot(page, "budgets")
    go(page, "Runs")
    shoot(page, "runs")


PHONE: ViewportSize = {"width": 390, "height": 844}
PATHS = ["/", "/runs", "/runs/r-killed", "/approvals", "/unknown", "/halts", "/budgets", "/holds"]


def test_every_page_fits_a_phone(browser: Browser, login_url: str) -> None:
    """At a phone's width no page is wider than the screen, and the decision forms can be
    filled in: nothing a person must reach is off to the side."""
    context = browser.new_context(viewport=PHONE, is_mobile=True)
    phone = context.new_page()
    phone.goto(login_url)
    for path in PATHS:
        phone.goto(login_url.split("/login")[0] + path)
        wide = page_width(phone)
        assert wide <= PHONE["width"], f"{path} is {wide} px wide"
        for field in phone.locator("main form input[name=by]").all():
            box = field.bounding_box()
            assert box is not None
            assert box["x"] + box["width"] <= PHONE["width"], path
    context.close()


def test_a_person_on_a_phone_resolves_an_effect_with_the_servers_text_reply(
    browser: Browser, login_url: str, incidents: str
) -> None:
    """The decision itself, not only its layout, works at a phone's width: every control is
    tapped, and the reply typed as text reaches the ledger as the string typed."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    phone = context.new_page()
    phone.goto(login_url)
    phone.goto(login_url.split("/login")[0] + "/unknown")
    effect = phone.locator("article", has_text="r-killed")
    effect.get_by_label("Done: it happened").tap()
    effect.get_by_label("Result (JSON").fill("250 2.0.0 Ok: queued as 4F2A1")
    effect.get_by_label("Plain text").tap()
    effect.get_by_label("Your name").fill("bob")
    effect.get_by_role("button", name="Record the decision").tap()
    expect(phone.get_by_role("status")).to_contain_text("Decision recorded")
    context.close()
    with oncelog.open(incidents) as ledger:
        [step] = ledger.steps("r-killed")
    assert (step.state, step.result) == (oncelog.StepState.DONE, "250 2.0.0 Ok: queued as 4F2A1")


def test_a_person_on_a_phone_releases_a_hold_from_the_subjects_and_holds_page(
    browser: Browser, login_url: str, incidents: str, tmp_path: Path
) -> None:
    """The new page at a phone's width: reached from the navigation, no wider than the
    screen, listing a subject and a live hold, whose release needs "force" and is taken."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    phone = context.new_page()
    phone.goto(login_url)
    with oncelog.open(incidents) as ledger:

        @ledger.tool(kind="payment", name="refund", once_per=lambda order: ("refund", order))
        def refund(order: str, *, idempotency_key: str) -> str:
            return f"re_{order}"

        with ledger.run("r-refund") as run:
            run.effect("refund", refund, "o-1")
        with ledger.run("r-holder") as run, run.hold(("host", "db-1")):
            go(phone, "Subjects & holds")
            expect(phone.get_by_role("heading", name="Subjects & holds")).to_be_visible()
            expect(phone.locator("table.subjects")).to_contain_text('["refund","o-1"]')
            wide = page_width(phone)
            assert wide <= PHONE["width"], f"/holds is {wide} px wide"
            phone.wait_for_load_state()  # the stylesheet too
            phone.screenshot(path=str(tmp_path / "console-holds-phone.png"), full_page=True)
            shoot(phone, "holds")
            hold = phone.locator("article", has_text='["host","db-1"]')
            hold.get_by_label("Your name").fill("erin")
            hold.get_by_label("Why the resource is safe").fill("maintenance done by hand")
            hold.get_by_role("button", name="Release this hold").tap()
            expect(phone.get_by_role("alert")).to_contain_text("ResourceHeld")
            hold = phone.locator("article", has_text='["host","db-1"]')
            expect(hold.get_by_label("Your name")).to_have_value("erin")  # kept
            hold.get_by_label("Release even if").tap()
            hold.get_by_role("button", name="Release this hold").tap()
            expect(phone.get_by_role("status")).to_contain_text("Hold released")
            [released] = ledger.holds()
    context.close()
    assert (released.holder, released.state) == ("r-holder", "free")


DESKTOP: ViewportSize = {"width": 1280, "height": 800}


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_a_refused_decision_is_typed_once_then_a_kill_switch_on_the_run(
    browser: Browser, login_url: str, incidents: str, tmp_path: Path, viewport: ViewportSize
) -> None:
    """At a phone's width and a desktop's: the checkboxes are boxes, not fields; a decision
    refused comes back as typed, so ticking one box more records it; the run page shows
    the wait for a person apart from the call; a kill switch on the run goes on and off."""
    from playwright.sync_api import expect

    phone = viewport is PHONE
    context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
    person = context.new_page()
    person.goto(login_url)
    base = login_url.split("/login")[0]
    person.goto(base + "/unknown")
    effect = person.locator("article", has_text="r-killed")
    for box in ("Plain text", "No result"):
        size = effect.get_by_label(box).bounding_box()
        assert size is not None
        assert size["width"] < 40, f"the {box!r} checkbox is {size['width']} px wide"
    effect.get_by_label("Done: it happened").check()
    effect.get_by_label("Result (JSON").fill("250 2.0.0 Ok: queued as 4F2A1")
    effect.get_by_label("Your name").fill("bob")
    effect.get_by_label("Note").fill("the server's reply")
    effect.get_by_role("button", name="Record the decision").click()
    expect(person.get_by_role("alert")).to_contain_text("not JSON")
    effect = person.locator("article", has_text="r-killed")
    expect(effect.get_by_label("Result (JSON")).to_have_value("250 2.0.0 Ok: queued as 4F2A1")
    expect(effect.get_by_label("Your name")).to_have_value("bob")
    expect(effect.get_by_label("Note")).to_have_value("the server's reply")
    expect(effect.get_by_label("Done: it happened")).to_be_checked()
    effect.get_by_label("Plain text").check()  # the one thing missing
    effect.get_by_role("button", name="Record the decision").click()
    expect(person.get_by_role("status")).to_contain_text("Decision recorded")
    with oncelog.open(incidents) as ledger:
        [step] = ledger.steps("r-killed")
    assert (step.state, step.result) == (oncelog.StepState.DONE, "250 2.0.0 Ok: queued as 4F2A1")
    person.goto(base + "/runs/r-killed")
    expect(person.locator("p.waited")).to_contain_text("call not timed; resolved by bob")
    wide = page_width(person)
    assert wide <= viewport["width"], f"the run page is {wide} px wide"
    person.screenshot(path=str(tmp_path / f"run-{viewport['width']}.png"))
    go(person, "Halts")
    person.get_by_label("Covers").select_option("run")
    person.get_by_label("Run id or agent").fill("r-killed")
    person.get_by_label("Reason").fill("looking at the email")
    person.get_by_label("Your name").fill("carol")
    person.get_by_role("button", name="Turn on").click()
    expect(person.get_by_role("status")).to_contain_text("Kill switch on")
    switch = person.locator("article", has_text="looking at the email")
    switch.get_by_label("Your name").fill("dave")
    switch.get_by_label("Why it is safe").fill("looked")
    switch.get_by_role("button", name="Clear this switch").click()
    expect(person.get_by_role("status")).to_contain_text("Kill switch off")
    person.screenshot(path=str(tmp_path / f"halts-{viewport['width']}.png"), full_page=True)
    context.close()
    with oncelog.open(incidents) as ledger:
        [cleared] = ledger.halts(active_only=False)
    assert (cleared.scope, cleared.target, cleared.cleared_by) == (
        oncelog.HaltScope.RUN,
        "r-killed",
        "dave",
    )


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_a_person_approves_a_refund_with_edited_arguments(
    browser: Browser, login_url: str, incidents: str, tmp_path: Path, viewport: ViewportSize
) -> None:
    """The request's call comes prefilled by parameter name; an edit missing a parameter is
    refused and comes back as typed; the edited call is approved, and the decided list
    shows what changed of what was asked."""
    from playwright.sync_api import expect

    with oncelog.open(incidents) as ledger:
        refund_pending(ledger)
    phone = viewport is PHONE
    context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
    person = context.new_page()
    person.goto(login_url)
    go(person, "Approvals")
    request = person.locator("article", has_text="r-refund")
    request.get_by_text("Approve with edited arguments").click()
    edited = request.get_by_label("Edited arguments")
    expect(edited).to_have_value('{\n  "amount": 150,\n  "order": "o-7"\n}')
    request.get_by_label("Your name").fill("alice")
    edited.fill('{"amount": 100}')
    request.get_by_role("button", name="Approve the edited call").click()
    expect(person.get_by_role("alert")).to_contain_text("missing parameter 'order'")
    request = person.locator("article", has_text="r-refund")
    expect(request.get_by_label("Edited arguments")).to_have_value('{"amount": 100}')
    request.get_by_label("Edited arguments").fill('{"order": "o-7", "amount": 100}')
    request.get_by_label("Your name").fill("alice")
    person.screenshot(path=str(tmp_path / f"edit-{viewport['width']}.png"), full_page=True)
    request.get_by_role("button", name="Approve the edited call").click()
    expect(person.get_by_role("status")).to_contain_text("edited arguments")
    expect(person.locator("pre.changes").first).to_contain_text("amount: 150 → 100")
    wide = page_width(person)
    assert wide <= viewport["width"], f"the approvals page is {wide} px wide"
    person.screenshot(path=str(tmp_path / f"edited-{viewport['width']}.png"), full_page=True)
    shoot(person, f"approvals-edited-{viewport['width']}")
    context.close()
    with oncelog.open(incidents) as ledger:
        [edit] = ledger.approval_edits("r-refund", "refund")
    assert (edit.by, edit.edited_args_json) == ("alice", '{"amount":100,"order":"o-7"}')
