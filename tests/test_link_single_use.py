"""A notice's decision link is the credential for its one decision, taken once (issue 41,
item 4): a ``deny`` link confirmed with ``decision=approve`` approves nothing, a
``not_done`` link confirmed with ``resolution=done`` records nothing, and one retry link
confirmed many times at once, against a real console process, retries once, and never
again after the retried effect is refused again. Effects are counted at a provider
process; both stores."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import oncelog

from .support.console_client import BASE, Person, console_client, store_state
from .support.launch import python
from .support.provider_process import Provider

CONSOLE = "https://console.example:8470"
SECRET = "link-secret-of-the-tests-" + "k" * 32
LINK_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
TIMEOUT = 60.0
Notified = tuple[oncelog.Ledger, list[oncelog.PersonNeeded]]


@pytest.fixture
def linked(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ledger URL, with a link secret in the environment (a PostgreSQL ledger has no
    folder to keep one in), which the console processes started here inherit."""
    monkeypatch.setenv("ONCELOG_LINK_SECRET", SECRET)
    return store_url


@contextmanager
def notified(url: str, console: str = CONSOLE) -> Iterator[Notified]:
    got: list[oncelog.PersonNeeded] = []

    def keep(alert: oncelog.BudgetAlert | oncelog.PersonNeeded) -> None:
        if isinstance(alert, oncelog.PersonNeeded):
            got.append(alert)

    with oncelog.open(url, on_alert=keep, notify_console_url=console) as ledger:
        yield ledger, got


def send_to(provider: Provider, run: str, key: str, payload: dict[str, Any]) -> Any:
    """The effect, performed (and counted) at the provider's process."""
    body = json.dumps({"key": key, "run": run, "payload": payload}).encode()
    request = urllib.request.Request(
        provider.url + "/effect", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
        return json.loads(answer.read())


def confirm(person: Person, url: str, fields: dict[str, str]) -> tuple[int, str]:
    """Open the link's page, then post its form with ``fields``, as a browser would."""
    page = person.get(urlsplit(url).path)
    found = LINK_CSRF.search(page.text)
    assert found is not None, f"no form on the link page ({page.status_code}): {page.text}"
    answer = person.client.post(
        urlsplit(url).path, data={"csrf": found.group(1), **fields},
        headers={"Origin": BASE}, follow_redirects=False,
    )  # fmt: skip
    return answer.status_code, answer.text


def test_a_deny_link_confirmed_as_approve_approves_nothing(linked: str, provider: Provider) -> None:
    with notified(linked) as (ledger, got):

        @ledger.tool(kind="destructive", name="wipe")
        def wipe(table: str, *, idempotency_key: str) -> Any:
            return send_to(provider, "r1", idempotency_key, {"wipe": table})

        def attempt() -> Any:
            with ledger.run("r1") as run:
                return run.effect("wipe", wipe, "users")

        with pytest.raises(oncelog.ApprovalRequired):
            attempt()
        deny = (got[-1].links or {})["deny"]
        with console_client(ledger, login=False) as person:
            before = store_state(ledger)
            status, page = confirm(person, deny, {"decision": "approve", "by": "mallory"})
            after = store_state(ledger)
            with suppress(oncelog.ApprovalRequired):  # still waiting for a person
                attempt()
            assert provider.total("r1") == 0  # the wipe did not run
            assert status == 400, page
            assert "this link decides &#39;deny&#39; and nothing else" in page
            assert after == before
            page = person.get(urlsplit(deny).path).text
            assert 'value="deny" checked' in page
            assert 'value="approve"' not in page  # the page offers the link's decision only
            status, page = confirm(person, deny, {"decision": "deny", "by": "dana"})
            assert status == 200, page
        with pytest.raises(oncelog.ApprovalDenied):
            attempt()
        [denied] = ledger.approvals("denied")
        assert denied.decided_by == "dana"
    assert provider.total("r1") == 0  # the destructive call never ran


@pytest.mark.parametrize(("signed", "asked"), [("not_done", "done"), ("done", "not_done")])
def test_a_resolve_link_records_its_own_answer_only(
    linked: str, provider: Provider, signed: str, asked: str
) -> None:
    with notified(linked) as (ledger, got):

        @ledger.tool(kind="create", name="send")
        def send(to: str, *, idempotency_key: str) -> None:
            send_to(provider, "r1", idempotency_key, {"to": to})
            raise ConnectionError("the answer was lost")  # sent: the outcome is in doubt

        def attempt() -> None:
            with ledger.run("r1") as run:
                run.effect("mail", send, "a@example.com")

        with pytest.raises(oncelog.AmbiguousOutcome):
            attempt()
        assert provider.total("r1") == 1
        url = (got[-1].links or {})[signed]
        fields = {"resolution": asked, "by": "mallory"}
        if asked == "done":
            fields["result"] = '{"id": "forged"}'
        with console_client(ledger, login=False) as person:
            before = store_state(ledger)
            status, page = confirm(person, url, fields)
            assert ledger.steps("r1")[0].state is oncelog.StepState.UNKNOWN
            assert status == 400, page
            assert "nothing is recorded" in page
            assert store_state(ledger) == before
        with pytest.raises(oncelog.AmbiguousOutcome):  # still in doubt: not sent again
            attempt()
    assert provider.total("r1") == 1


@contextmanager
def console_process(url: str, tmp_path: Path) -> Iterator[str]:
    """``oncelog console`` on a free port, in a process of its own: its base URL."""
    oncelog.open(url).close()  # the console opens a ledger that is there only
    argv = python("-m", "oncelog", "console", "--db", url, "--port", "0")
    argv += ["--token-file", str(tmp_path / "console-token")]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        first = process.stdout.readline()
        assert "oncelog console on http://127.0.0.1:" in first, first
        yield first.split(" on ")[1].split("/ ")[0]
    finally:
        process.terminate()
        process.communicate(timeout=TIMEOUT)


def post_form(url: str, origin: str, fields: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=urllib.parse.urlencode(fields).encode(), headers={"Origin": origin}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def csrf_of(url: str) -> str:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as page:
        found = LINK_CSRF.search(page.read().decode())
    assert found is not None, "no form on the link page"
    return found.group(1)


def all_at_once(calls: list[Callable[[], tuple[int, str]]]) -> list[tuple[int, str]]:
    """Run every call in its own thread, released together."""
    start = threading.Barrier(len(calls))
    answers: list[tuple[int, str] | None] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait(timeout=TIMEOUT)
        answers[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    assert all(a is not None for a in answers), "a confirmation did not come back"
    return [a for a in answers if a is not None]


def retried(ledger: oncelog.Ledger) -> list[oncelog.JournalEntry]:
    return [e for e in ledger.journal("r1") if e.event == "retried"]


@pytest.mark.parametrize("posts", [6])
def test_one_retry_link_confirmed_at_once_retries_once_and_never_again(
    linked: str, provider: Provider, tmp_path: Path, posts: int
) -> None:
    quota_exceeded = tmp_path / "quota-exceeded"  # the provider's refusal, until removed
    quota_exceeded.touch()
    with console_process(linked, tmp_path) as console, notified(linked, console) as (ledger, got):

        @ledger.tool(kind="create", name="send", refusals=(PermissionError,))
        def send(to: str, *, idempotency_key: str) -> Any:
            if quota_exceeded.exists():
                raise PermissionError("the mail service refuses: quota exceeded")
            return send_to(provider, "r1", idempotency_key, {"to": to})

        def attempt() -> Any:
            with ledger.run("r1") as run:
                return run.effect("mail", send, "a@example.com")

        with pytest.raises(oncelog.EffectRefused):
            attempt()
        link = (got[-1].links or {})["retry"]
        csrf = csrf_of(link)
        answers = all_at_once([
            lambda i=i: post_form(link, console, {"csrf": csrf, "by": f"p{i}", "note": "up"})  # type: ignore[misc]
            for i in range(posts)
        ])  # fmt: skip
        assert len(retried(ledger)) == 1
        winner = retried(ledger)[0].data["by"]
        assert sorted(status for status, _ in answers) == [200] + [409] * (posts - 1), answers
        for status, page in answers:
            if status == 409:
                assert "Already decided" in page
                assert winner in page

        # The retried effect is refused again: the step is at attempt 1 again, as the
        # link says, and the link still decides nothing; the new notice's link does.
        with pytest.raises(oncelog.EffectRefused):
            attempt()
        again = post_form(link, console, {"csrf": csrf, "by": "person-late", "note": "up"})
        assert again[0] == 409, again
        assert winner in again[1]
        assert len(retried(ledger)) == 1
        quota_exceeded.unlink()
        fresh = (got[-1].links or {})["retry"]
        assert fresh != link
        fields = {"csrf": csrf_of(fresh), "by": "dana", "note": "quota raised"}
        status, page = post_form(fresh, console, fields)
        assert status == 200, page
        attempt()
        assert [e.data["by"] for e in retried(ledger)] == [winner, "dana"]
    assert provider.total("r1") == 1


def test_the_store_takes_a_link_once_and_a_failed_decision_leaves_it(
    linked: str, provider: Provider
) -> None:
    with notified(linked) as (ledger, _):

        @ledger.tool(kind="create", name="send")
        def send(to: str, *, idempotency_key: str) -> None:
            send_to(provider, "r1", idempotency_key, {"to": to})
            raise ConnectionError("the answer was lost")

        with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r1") as run:
            run.effect("mail", send, "a@example.com")
        with pytest.raises(oncelog.AttemptMismatch):  # refused: the link stays unused
            ledger.resolve("r1", "mail", "not_done", by="dana", attempt=2, link="nonce-1")
        assert ledger.used_link("nonce-1") is None
        ledger.resolve("r1", "mail", "not_done", by="dana", attempt=1, link="nonce-1")
        used = ledger.used_link("nonce-1")
        assert used is not None
        assert (used.run_id, used.decision, used.by) == ("r1", "not_done", "dana")
        with pytest.raises(oncelog.LinkUsed, match="not_done by dana") as refused:
            ledger.retry("r1", "mail", by="eve", why="again", link="nonce-1")
        assert (refused.value.used_by, refused.value.decision) == ("dana", "not_done")
        assert isinstance(refused.value, oncelog.ConflictError)
        assert [e.event for e in ledger.journal("r1")].count("retried") == 0
    assert provider.total("r1") == 1
