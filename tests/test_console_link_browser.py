"""A notice's signed link opened in a real headless Chromium (Debian's) against the real
``oncelog console`` process, on a phone's width and a desktop's: the page opens prefilled
without a login, decides nothing until "Confirm", and says so once it has; a second
opening says who decided. Screenshots go to a temporary folder (and, with
``ONCELOG_SCREENSHOTS=docs/screenshots``, to the docs).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import oncelog

from .support.launch import python
from .test_console_browser import browser  # noqa: F401  (the fixture)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

SCREENSHOTS = os.environ.get("ONCELOG_SCREENSHOTS")
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1280, "height": 800}


@pytest.fixture
def console(db_path: str, tmp_path: Path) -> Iterator[str]:
    """``oncelog console`` on a free port: its base URL."""
    with oncelog.open(db_path):
        pass
    argv = python("-m", "oncelog", "console", "--db", db_path, "--port", "0")
    argv += ["--token-file", str(tmp_path / "console-token")]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    first = process.stdout.readline()
    try:
        assert "oncelog console on http://127.0.0.1:" in first, first
        yield first.split(" on ")[1].split("/ ")[0]
    finally:
        process.terminate()
        process.communicate(timeout=30)


def halted_notice(db_path: str, console: str) -> oncelog.PersonNeeded:
    got: list[oncelog.PersonNeeded] = []
    with oncelog.open(
        db_path, notify_console_url=console,
        on_alert=lambda a: got.append(a) if isinstance(a, oncelog.PersonNeeded) else None,
    ) as ledger:  # fmt: skip

        @ledger.tool(
            kind="create", name="send_email",
            evidence_url="https://mail.example/messages?idempotency_key={key}",
        )  # fmt: skip
        def send_email(to: str, subject: str, *, idempotency_key: str) -> None:
            raise ConnectionError("Connection reset by peer")

        with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("ticket-4711") as run:
            run.effect("reply", send_email, "customer@example.com", subject="Your refund")
    [notice] = got
    return notice


def shoot(page: Page, folder: Path, name: str) -> None:
    page.wait_for_load_state()
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / f"console-{name}.png"), full_page=True)


@pytest.mark.parametrize(("viewport", "width"), [(PHONE, "phone"), (DESKTOP, "desktop")])
def test_a_person_confirms_from_the_notice_link(
    browser: Browser,  # noqa: F811
    console: str,
    db_path: str,
    tmp_path: Path,
    viewport: ViewportSize,
    width: str,
) -> None:
    from playwright.sync_api import expect

    notice = halted_notice(db_path, console)
    context = browser.new_context(viewport=viewport)  # no login: the link is enough
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text))
    page.goto((notice.links or {})["done"])
    expect(page.get_by_role("heading", name="What happened at the provider?")).to_be_visible()
    expect(page.get_by_label("Done: it happened")).to_be_checked()  # the button pressed
    expect(page.get_by_role("link", name=notice.evidence_url or "")).to_be_visible()
    if width == "phone":
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a phone"
        box = page.get_by_label("Plain text").bounding_box()
        assert box is not None
        assert box["width"] < 40  # a checkbox, not a wide centred box
    # Reached without a login: no navigation to pages that would answer 401.
    expect(page.get_by_role("navigation")).to_have_count(0)
    expect(page.get_by_role("link", name="The run's page")).to_have_count(0)
    shoot(page, tmp_path, "link" if width == "phone" else "link-desktop")
    with oncelog.open(db_path) as ledger:
        assert ledger.steps("ticket-4711")[0].state is oncelog.StepState.UNKNOWN

    page.get_by_label("The provider's answer").fill('{"id": "msg_7"}')
    page.get_by_label("Your name").fill("dana")
    page.get_by_role("button", name="Confirm: done, with the answer above").click()
    expect(page.get_by_role("status")).to_contain_text("Your decision is recorded")
    shoot(page, tmp_path, f"link-confirmed-{width}")
    with oncelog.open(db_path) as ledger:
        [step] = ledger.steps("ticket-4711")
    assert (step.state, step.result) == (oncelog.StepState.DONE, {"id": "msg_7"})

    page.goto((notice.links or {})["not_done"])  # another button of the same notice
    expect(page.get_by_role("heading", name="Already decided")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("dana")
    expect(page.get_by_role("button", name="Confirm")).to_have_count(0)
    context.close()
    assert problems == []
