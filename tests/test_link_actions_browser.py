"""The on-call path counted as a person walks it (issue 43, items 2 and 6): from the link
in a notice, in Debian's headless Chromium, to the decision recorded, against a real
``oncelog console`` process, a real agent process waiting in place, and a provider process
that counts what it performed. Each action is one a person makes: opening the link,
typing or editing a value, pressing a button. The docs promise two actions where nothing
must be typed and three where a value must be (docs/notices.md).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import oncelog

from .support.launch import environment, python
from .support.provider_process import Provider
from .support.receiver import receiving
from .test_console_browser import browser  # noqa: F401  (the fixture)
from .test_notice_links import TIMEOUT, agent, console, next_body, reap  # noqa: F401

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext

REFUNDER = Path(__file__).parent / "notice_agents" / "refunder.py"


class Person:
    """A person at the browser, counting the actions they make."""

    def __init__(self, context: BrowserContext) -> None:
        self.page = context.new_page()
        self.actions = 0

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.actions += 1

    def type(self, label: str, text: str) -> None:
        self.page.get_by_label(label).fill(text)
        self.actions += 1

    def edit(self, label: str, old: str, new: str) -> None:
        """Change one value in a field, leaving the rest as it is."""
        field = self.page.get_by_label(label)
        value = field.input_value()
        assert old in value, value
        field.fill(value.replace(old, new))
        self.actions += 1

    def press(self, button: str) -> None:
        self.page.get_by_role("button", name=button, exact=True).click()
        self.actions += 1

    def sees_recorded(self) -> None:
        from playwright.sync_api import expect

        expect(self.page.get_by_role("status")).to_contain_text("Your decision is recorded")


@pytest.fixture
def dana(browser: Browser, db_path: str, console: str) -> Iterator[Person]:  # noqa: F811
    """Dana's browser, after her first decision from a notice in it: open, type her name,
    confirm (three actions: a value had to be typed). The browser remembers the name."""
    got: list[oncelog.PersonNeeded] = []
    with oncelog.open(
        db_path, notify_console_url=console,
        on_alert=lambda a: got.append(a) if isinstance(a, oncelog.PersonNeeded) else None,
    ) as ledger:  # fmt: skip

        @ledger.tool(kind="destructive", name="wipe")
        def wipe(*, idempotency_key: str) -> None:
            raise AssertionError("denied: never called")

        with pytest.raises(oncelog.ApprovalRequired), ledger.run("earlier") as run:
            run.effect("wipe", wipe)
    context = browser.new_context()
    person = Person(context)
    person.open((got[0].links or {})["deny"])
    person.type("Your name", "dana")
    person.press("Confirm")
    person.sees_recorded()
    assert person.actions == 3
    person.actions = 0
    yield person
    context.close()


def refunder(db_path: str, provider: Provider, hook: str, url: str) -> subprocess.Popen[str]:
    """The refund agent, waiting in place for a decision from the console at ``url``."""
    return subprocess.Popen(
        python(REFUNDER, db_path, "r1", provider.url, hook, "--wait", "120"),
        env=environment(ONCELOG_CONSOLE_URL=url),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def completed(waiting: subprocess.Popen[str]) -> None:
    stdout, stderr = waiting.communicate(timeout=TIMEOUT)
    assert waiting.returncode == 0, stderr
    assert "completed" in stdout


def test_an_approval_is_open_and_confirm(
    dana: Person, db_path: str, provider: Provider, console: str,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    with receiving() as hook:
        waiting = refunder(db_path, provider, hook.url, console)
        request.addfinalizer(lambda: reap(waiting))
        links = next_body(hook, waiting)["links"]
        dana.open(links["approve"])
        assert dana.page.get_by_label("Your name").input_value() == "dana"  # remembered
        dana.press("Confirm")
        dana.sees_recorded()
        completed(waiting)
    assert dana.actions == 2
    [refund] = provider.effects("r1")
    assert refund.payload == {"amount": 120, "to": "customer@example.com"}


def test_an_edited_approval_is_open_edit_and_confirm(
    dana: Person, db_path: str, provider: Provider, console: str,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    with receiving() as hook:
        waiting = refunder(db_path, provider, hook.url, console)
        request.addfinalizer(lambda: reap(waiting))
        links = next_body(hook, waiting)["links"]
        dana.open(links["approve"])
        dana.edit("The arguments, by parameter name", '"amount": 120', '"amount": 80')
        dana.press("Confirm")
        dana.sees_recorded()
        completed(waiting)
    assert dana.actions == 3
    [refund] = provider.effects("r1")  # once, with the arguments Dana approved
    assert refund.payload == {"amount": 80, "to": "customer@example.com"}
    with oncelog.open(db_path) as ledger:
        [edit] = ledger.approval_edits("r1", "refund")
    assert edit.by == "dana"


def test_a_deny_link_edits_nothing(
    dana: Person, db_path: str, provider: Provider, console: str,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """Editing is the approve link's authority: a deny link's page offers no edit, and a
    POST that sends arguments to it is refused with nothing recorded."""
    from playwright.sync_api import expect

    with receiving() as hook:
        waiting = refunder(db_path, provider, hook.url, console)
        request.addfinalizer(lambda: reap(waiting))
        links = next_body(hook, waiting)["links"]
        dana.open(links["deny"])
        expect(dana.page.get_by_label("The arguments, by parameter name")).to_have_count(0)
        csrf = dana.page.locator('input[name="csrf"]').get_attribute("value")
        answer = dana.page.request.post(
            links["deny"], headers={"Origin": console},
            form={"csrf": csrf or "", "by": "dana", "args": '{"amount": 1, "to": "x"}'},
        )  # fmt: skip
        assert answer.status == 400, answer.text()
        assert "a deny link cannot edit the arguments" in answer.text()
        with oncelog.open(db_path) as ledger:
            assert [a.status for a in ledger.approvals(None) if a.run_id == "r1"] == [
                oncelog.ApprovalStatus.PENDING
            ]
    assert provider.total("r1") == 0


def in_doubt(db_path: str, provider: Provider, hook: str) -> None:
    """The email went out and the agent was SIGKILLed before it heard: in doubt."""
    first = agent(db_path, provider, hook, "plain", "--kill")
    first.communicate(timeout=TIMEOUT)
    assert first.returncode == -9
    assert provider.total("r1") == 1


def test_done_is_open_and_confirm(
    dana: Person, db_path: str, provider: Provider, console: str,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    with receiving() as hook:
        in_doubt(db_path, provider, hook.url)
        waiting = agent(db_path, provider, hook.url, "plain", "--wait", "120", console=console)
        request.addfinalizer(lambda: reap(waiting))
        links = next_body(hook, waiting)["links"]
        dana.open(links["done"])
        dana.press("Confirm: done, no result")
        dana.sees_recorded()
        completed(waiting)
    assert dana.actions == 2
    assert provider.total("r1") == 1  # not sent again
    with oncelog.open(db_path) as ledger:
        [step] = ledger.steps("r1")
    assert step.result is oncelog.NO_RESULT


@pytest.mark.parametrize("provider_mode", ["honours_keys"])
def test_not_done_is_open_and_confirm(
    dana: Person, db_path: str, provider: Provider, console: str,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    with receiving() as hook:
        in_doubt(db_path, provider, hook.url)
        waiting = agent(db_path, provider, hook.url, "plain", "--wait", "120", console=console)
        request.addfinalizer(lambda: reap(waiting))
        links = next_body(hook, waiting)["links"]
        dana.open(links["not_done"])
        dana.press("Confirm")
        dana.sees_recorded()
        completed(waiting)
    assert dana.actions == 2
    # Sent again with the same key: the provider answered with its first performance.
    assert provider.total("r1") == 1
    assert [r.outcome for r in provider.requests("r1")] == ["performed", "replayed"]
