"""Attacks on the signed decision links a person-needed notice carries (issue 33, item 1):
a forged signature, a step swapped for another, a link for an older attempt, a replay, an
expired link, a decision already made by the CLI, a GET that must decide nothing (a link
preview), a cross-origin POST, an evidence URL a key could bend. Against a real SQLite
ledger and the console's app; the notices are the ones the ledger sent."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest

import oncelog
from oncelog.notices import slack_blocks, telegram_message

from .support.console_client import BASE, Person, console_client, store_state
from .support.operator_commands import oncelog_cli

CONSOLE = "https://console.example:8470"
LINK_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
Notified = tuple[oncelog.Ledger, list[oncelog.PersonNeeded]]


@pytest.fixture
def notices(db_path: str) -> Iterator[Notified]:
    got: list[oncelog.PersonNeeded] = []

    def keep(alert: oncelog.BudgetAlert | oncelog.PersonNeeded) -> None:
        if isinstance(alert, oncelog.PersonNeeded):
            got.append(alert)

    with oncelog.open(db_path, on_alert=keep, notify_console_url=CONSOLE) as ledger:
        yield ledger, got


def halt_on_mail(ledger: oncelog.Ledger, run_id: str = "r1") -> None:
    @ledger.tool(
        kind="create", name="send",
        evidence_url="https://mail.example/search?key={key}&run={run}",
    )  # fmt: skip
    def send(to: str, password: str, *, idempotency_key: str) -> None:
        raise ConnectionError("Connection refused")

    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run(run_id) as run:
        run.effect("mail", send, "a@example.com", password="hunter2-secret")


def path_of(url: str) -> str:
    """A link as the console (TestClient at BASE) is asked for it."""
    return urlsplit(url).path


def opened(person: Person, url: str) -> tuple[int, str, str | None]:
    page = person.get(path_of(url))
    found = LINK_CSRF.search(page.text)
    return page.status_code, page.text, found.group(1) if found else None


def confirm(person: Person, url: str, fields: dict[str, str]) -> tuple[int, str]:
    status, _, csrf = opened(person, url)
    assert csrf is not None, f"no form on the link page ({status})"
    answer = person.client.post(
        path_of(url), data={"csrf": csrf, **fields}, headers={"Origin": BASE},
        follow_redirects=False,
    )  # fmt: skip
    return answer.status_code, answer.text


def test_the_notice_carries_what_the_person_must_see(notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    [notice] = got
    step = ledger.steps("r1")[0]
    assert (notice.tool, notice.key, notice.attempt) == ("send", step.key, 1)
    assert notice.args["args"][0] == "a@example.com"
    assert "hunter2-secret" not in json.dumps(notice.args)  # masked as every surface does
    assert "Connection refused" in (notice.reason or "")
    assert notice.evidence_url is not None
    assert notice.evidence_url.startswith("https://mail.example/search?key=")
    assert set(notice.links or {}) == {"done", "not_done", "abandon"}
    assert all(url.startswith(CONSOLE + "/link/") for url in (notice.links or {}).values())
    posted = json.loads(notice.to_json())
    assert posted["links"] == notice.links
    assert posted["key"] == step.key


def test_a_get_decides_nothing_and_one_post_decides(notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    links = got[0].links or {}
    with console_client(ledger, login=False) as person:
        before = store_state(ledger)
        for _ in range(3):  # a chat client's preview, a curious click, a reload
            status, page, _ = opened(person, links["not_done"])
            assert status == 200, page
            assert 'value="not_done" checked' in page
        assert store_state(ledger) == before
        status, page = confirm(person, links["not_done"], {"resolution": "not_done", "by": "dana"})
        assert status == 200, page
        assert "Your decision is recorded" in page
    assert ledger.steps("r1")[0].state is oncelog.StepState.NOT_DONE
    resolved = [e for e in ledger.journal("r1") if e.event == "resolved"]
    assert resolved[-1].data["by"] == "dana"
    assert urlsplit(links["not_done"]).path.rpartition("/")[2] not in resolved[-1].data["note"]
    assert "through the notice's link" in resolved[-1].data["note"]


def test_a_replayed_link_says_who_decided(notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    links = got[0].links or {}
    with console_client(ledger, login=False) as person:
        assert confirm(person, links["abandon"], {"resolution": "abandon", "by": "dana"})[0] == 200
        before = store_state(ledger)
        status, page, csrf = opened(person, links["not_done"])
        assert status == 200, page
        assert csrf is None, page  # no form: nothing left to decide
        assert "Already decided" in page
        assert "dana" in page
        again = person.client.post(
            path_of(links["abandon"]), headers={"Origin": BASE}, follow_redirects=False,
            data={"csrf": "x", "resolution": "not_done", "by": "eve"},
        )  # fmt: skip
        assert again.status_code == 403
    assert store_state(ledger) == before


def test_a_decision_made_by_the_cli_spends_the_link(db_path: str, notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    links = got[0].links or {}
    with console_client(ledger, login=False) as person:
        _, _, csrf = opened(person, links["done"])
        oncelog_cli(db_path, "resolve", "r1", "mail", "not_done", "--by", "carol",
                    "--attempt", "1")  # fmt: skip
        before = store_state(ledger)
        answer = person.client.post(
            path_of(links["done"]), headers={"Origin": BASE}, follow_redirects=False,
            data={"csrf": csrf or "", "resolution": "done", "by": "eve", "no_result": "yes"},
        )  # fmt: skip
        assert answer.status_code == 409, answer.text
        assert "carol" in answer.text
    assert store_state(ledger) == before


def test_a_link_for_attempt_1_cannot_decide_attempt_2(notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    old = got[0].links or {}
    ledger.resolve("r1", "mail", "not_done", by="carol", attempt=1)
    halt_on_mail(ledger)  # attempt 2 is in doubt now, with a notice of its own
    assert got[-1].attempt == 2
    with console_client(ledger, login=False) as person:
        before = store_state(ledger)
        _status, page, csrf = opened(person, old["abandon"])
        assert csrf is None, page
        assert "carol" in page
        assert confirm(person, (got[-1].links or {})["abandon"],
                       {"resolution": "abandon", "by": "dana"})[0] == 200  # fmt: skip
        assert store_state(ledger) != before


def forged(url: str, **changes: object) -> str:
    """The link with its claims changed and its signature kept."""
    token = unquote(urlsplit(url).path.rpartition("/")[2])
    payload, mac = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{BASE}/link/{body}.{mac}"


@pytest.mark.parametrize(
    "changes",
    [{"step_id": "other"}, {"run_id": "victim"}, {"number": 2}, {"expires": 4e9},
     {"action": "approval", "choice": "approve"}],
)  # fmt: skip
def test_a_forged_link_is_refused(notices: Notified, changes: dict[str, object]) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    url = forged((got[0].links or {})["not_done"], **changes)
    with console_client(ledger, login=False) as person:
        before = store_state(ledger)
        status, page, csrf = opened(person, url)
        assert status == 410, page
        assert csrf is None
        assert "signature is wrong" in page
        answer = person.client.post(
            path_of(url), headers={"Origin": BASE}, follow_redirects=False,
            data={"csrf": "x", "resolution": "not_done", "by": "eve"},
        )  # fmt: skip
        assert answer.status_code == 410
    assert store_state(ledger) == before


def test_an_expired_link_names_the_command(db_path: str) -> None:
    got: list[oncelog.PersonNeeded] = []
    with oncelog.open(
        db_path, notify_console_url=CONSOLE, link_ttl=0.001,
        on_alert=lambda a: got.append(a) if isinstance(a, oncelog.PersonNeeded) else None,
    ) as ledger:  # fmt: skip
        halt_on_mail(ledger)
        with console_client(ledger, login=False) as person:
            status, page, csrf = opened(person, (got[0].links or {})["not_done"])
        assert status == 410
        assert csrf is None
        assert "expired" in page
        assert "oncelog resolve r1 mail not_done --by NAME --attempt 1" in page
        assert ledger.steps("r1")[0].state is oncelog.StepState.UNKNOWN


def test_a_cross_origin_post_is_refused(notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    url = (got[0].links or {})["not_done"]
    with console_client(ledger, login=False) as person:
        _, _, csrf = opened(person, url)
        before = store_state(ledger)
        answer = person.client.post(
            path_of(url), headers={"Origin": "https://evil.example"}, follow_redirects=False,
            data={"csrf": csrf or "", "resolution": "not_done", "by": "eve"},
        )  # fmt: skip
        assert answer.status_code == 403
    assert store_state(ledger) == before


def test_another_secret_signs_nothing_here(
    db_path: str, notices: Notified, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    secret_file = Path(db_path).parent / "link-secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    monkeypatch.setenv("ONCELOG_LINK_SECRET", "s" * 40)
    with (
        oncelog.open(db_path, notify_console_url=CONSOLE) as elsewhere,
        pytest.raises(oncelog.LinkRefused, match="signature"),
    ):
        elsewhere.check_link(unquote((got[0].links or {})["abandon"].rpartition("/")[2]))


def test_an_approval_link_binds_the_request(db_path: str) -> None:
    got: list[oncelog.PersonNeeded] = []
    with oncelog.open(
        db_path, notify_console_url=CONSOLE,
        on_alert=lambda a: got.append(a) if isinstance(a, oncelog.PersonNeeded) else None,
    ) as ledger:  # fmt: skip

        @ledger.tool(kind="destructive", name="wipe")
        def wipe(table: str, *, idempotency_key: str) -> str:
            return "wiped"

        with pytest.raises(oncelog.ApprovalRequired), ledger.run("r1") as run:
            run.effect("wipe", wipe, "users")
        [notice] = got
        assert set(notice.links or {}) == {"approve", "deny"}
        assert notice.args == {"args": ["users"], "kwargs": {}}
        with console_client(ledger, login=False) as person:
            status, page = confirm(person, (notice.links or {})["approve"],
                                   {"decision": "approve", "by": "dana"})  # fmt: skip
            assert status == 200, page
            [approval] = ledger.approvals("approved")
            assert approval.decided_by == "dana"
            status, page, csrf = opened(person, (notice.links or {})["deny"])
            assert csrf is None
            assert "Already decided" in page
            assert "dana" in page


@pytest.mark.parametrize(
    ("edited", "says"),
    [
        ('{"table": "users", "cascade": true}', "cascade"),  # not a parameter of the tool
        ('{"table": "users", "token": "stolen"}', "secret"),  # a secret field changed
        ('{"table": ', "not JSON"),
    ],
)
def test_an_approve_link_edits_only_as_the_console_may(
    db_path: str, edited: str, says: str
) -> None:
    """An approve link's edit goes through the ledger's checks: refused with the ledger's
    reason, nothing recorded, and the link still good for the approval."""
    got: list[oncelog.PersonNeeded] = []
    with oncelog.open(
        db_path, notify_console_url=CONSOLE, redaction_key=b"k" * 32,
        on_alert=lambda a: got.append(a) if isinstance(a, oncelog.PersonNeeded) else None,
    ) as ledger:  # fmt: skip

        @ledger.tool(kind="destructive", name="wipe", secret=("token",))
        def wipe(table: str, token: str = "t0", *, idempotency_key: str) -> str:
            return "wiped"

        with pytest.raises(oncelog.ApprovalRequired), ledger.run("r1") as run:
            run.effect("wipe", wipe, "users")
        link = (got[0].links or {})["approve"]
        with console_client(ledger, login=False) as person:
            _, page, _ = opened(person, link)
            assert "redacted:" in page  # the secret shown as its hash, in the edit form
            status, page = confirm(person, link, {"by": "dana", "args": edited})
            assert status == 400, page
            assert says in page
            assert [a.status.value for a in ledger.approvals(None)] == ["pending"]
            status, page = confirm(person, link, {"by": "dana", "args": ""})
            assert status == 200, page
        assert [a.status.value for a in ledger.approvals(None)] == ["approved"]


def test_a_retry_link_needs_its_note(db_path: str, notices: Notified) -> None:
    """As ``oncelog retry --why``: a retry says why it may go now, or nothing is recorded."""
    ledger, got = notices

    @ledger.tool(kind="create", name="send", refusals=(PermissionError,))
    def send(to: str, *, idempotency_key: str) -> None:
        raise PermissionError("the mail service refuses: quota exceeded")

    with pytest.raises(oncelog.EffectRefused), ledger.run("r1") as run:
        run.effect("mail", send, "a@example.com")
    link = (got[0].links or {})["retry"]
    with console_client(ledger, login=False) as person:
        assert 'name="note" maxlength="2000" required' in opened(person, link)[1]
        status, page = confirm(person, link, {"by": "dana", "note": " "})
        assert status == 400, page
        assert "a retry needs a note" in page
    assert [e for e in ledger.journal("r1") if e.event == "retried"] == []
    nonce = ledger.check_link(unquote(link.rpartition("/")[2])).nonce
    assert ledger.used_link(nonce) is None  # still good, with a note


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("https://x.example/{id}", "may use only"),
        ("https://x.example/{key!r}", "no format"),
        ("https://x.example/{key:>10}", "no format"),
        ("javascript:alert({key})", "http(s)"),
        ("https://{key}.example/", "not its host"),
        ("https://x.example/{", "not a template"),
    ],
)
def test_a_bad_evidence_url_is_refused_at_declaration(template: str, says: str) -> None:
    with pytest.raises(oncelog.ConfigurationError, match=re.escape(says)):
        oncelog.tool(kind="create", evidence_url=template)


def test_a_key_cannot_bend_the_evidence_url(notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger, run_id="a/../b?x=1#frag&key=evil")
    url = got[0].evidence_url or ""
    parts = urlsplit(url)
    assert (parts.netloc, parts.path, parts.fragment) == ("mail.example", "/search", "")
    assert parts.query.count("&") == 1  # key= and run=, nothing added by the run id


def test_slack_and_telegram_shapes_carry_the_links_as_url_buttons(notices: Notified) -> None:
    ledger, got = notices
    halt_on_mail(ledger)
    notice = got[0]
    slack = slack_blocks(notice)
    buttons = [e for b in slack["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert {b["url"] for b in buttons} == set((notice.links or {}).values())
    assert all(b["type"] == "button" for b in buttons)
    telegram = telegram_message(notice, chat_id="42")
    rows = telegram["reply_markup"]["inline_keyboard"]
    assert {b["url"] for row in rows for b in row} == set((notice.links or {}).values())
    assert telegram["chat_id"] == "42"


def test_no_console_url_means_no_links(db_path: str) -> None:
    os.environ.pop("ONCELOG_CONSOLE_URL", None)
    got: list[oncelog.PersonNeeded] = []
    with oncelog.open(
        db_path, on_alert=lambda a: got.append(a) if isinstance(a, oncelog.PersonNeeded) else None
    ) as ledger:
        halt_on_mail(ledger)
    assert got[0].links is None
    assert got[0].key is not None
    assert not (Path(db_path).parent / "link-secret").exists()


def test_every_surface_shows_the_evidence_url(db_path: str, notices: Notified) -> None:
    ledger, got = notices
    hostile = 'r"><script>alert(1)</script>'
    halt_on_mail(ledger, run_id=hostile)
    url = got[0].evidence_url or ""
    assert "<" not in url
    assert '"' not in url  # the run id is percent-encoded whole
    assert f"look up:   {url}" in oncelog_cli(db_path, "show", hostile)
    assert f"look up:   {url}" in oncelog_cli(db_path, "unknown")
    [row] = json.loads(oncelog_cli(db_path, "unknown", "--json"))
    assert row["evidence_url"] == url
    steps = json.loads(oncelog_cli(db_path, "show", hostile, "--json"))["steps"]
    assert steps[0]["evidence_url"] == url
    escaped = url.replace("&", "&amp;")
    with console_client(ledger) as person:
        for page in ("/unknown", "/runs/" + quote(hostile, safe="")):
            text = person.get(page).text
            assert f'href="{escaped}"' in text, page
            assert "<script>alert" not in text
        link_page = person.get(path_of((got[0].links or {})["done"])).text
        assert f'href="{escaped}"' in link_page


def test_a_retry_link_for_a_refused_effect(db_path: str, notices: Notified) -> None:
    ledger, got = notices

    @ledger.tool(kind="create", name="send", refusals=(PermissionError,))
    def send(to: str, *, idempotency_key: str) -> None:
        raise PermissionError("the mail service refuses: quota exceeded")

    with pytest.raises(oncelog.EffectRefused), ledger.run("r1") as run:
        run.effect("mail", send, "a@example.com")
    [notice] = got
    assert (notice.kind, notice.error, notice.attempt) == ("failed", "EffectRefused", 1)
    assert set(notice.links or {}) == {"retry"}
    with console_client(ledger, login=False) as person:
        status, page = confirm(person, (notice.links or {})["retry"],
                               {"by": "dana", "note": "quota raised"})  # fmt: skip
        assert status == 200, page
        [step] = ledger.steps("r1")
        assert (step.state, step.attempts) == (oncelog.StepState.NOT_DONE, 0)
        assert ledger.get_run("r1").status is oncelog.RunStatus.QUEUED
        [retried] = [e for e in ledger.journal("r1") if e.event == "retried"]
        assert retried.data["by"] == "dana"
        assert retried.data["why"].startswith("quota raised (through the notice's link ")
        _, page, csrf = opened(person, (notice.links or {})["retry"])
        assert csrf is None
        assert "Already decided" in page
        assert "dana" in page


def test_the_journal_keeps_no_link(db_path: str, notices: Notified) -> None:
    """A link is a capability; the journal is exported and shipped: it keeps the notice
    without its links."""
    ledger, got = notices
    halt_on_mail(ledger)
    assert got[0].links
    journal = json.dumps([e.data for e in ledger.journal("r1")])
    assert "/link/" not in journal
    for url in (got[0].links or {}).values():
        assert url.rpartition("/")[2][:40] not in journal
    [needed] = [e for e in ledger.journal("r1") if e.event == "person_needed"]
    assert needed.data["links"] is None
    assert needed.data["evidence_url"] == got[0].evidence_url


@pytest.mark.parametrize("scope", ["run", "agent"])
def test_a_resume_link_clears_the_runs_own_switch_only(notices: Notified, scope: str) -> None:
    ledger, got = notices
    halt_on_mail(ledger, run_id="r0")  # an earlier run of the agent, so the name is known
    got.clear()
    target = {"run": "r1"} if scope == "run" else {"agent": "mailer"}
    ledger.halt("audit", by="bob", ahead=True, **target)
    with pytest.raises(oncelog.RunHalted), ledger.run("r1", agent="mailer") as run:
        run.read("look", lambda: 1)
    [notice] = got
    if scope == "agent":  # it stops more than this run: cleared on purpose, not by a link
        assert notice.links is None
        return
    assert set(notice.links or {}) == {"resume"}
    with console_client(ledger, login=False) as person:
        status, page = confirm(person, (notice.links or {})["resume"], {"by": "dana"})
        assert status == 200, page
        assert ledger.halts() == []
        _, page, csrf = opened(person, (notice.links or {})["resume"])
        assert csrf is None
        assert "dana" in page


def test_a_resume_link_never_clears_a_switch_set_after_its_own(notices: Notified) -> None:
    """The link names switch N; if N is cleared and another set between the page's check
    and the store's write, the store refuses (the check and the write are one transaction
    only in the store): the later switch stays on."""
    ledger, got = notices
    halt_on_mail(ledger, run_id="r0")
    got.clear()
    first = ledger.halt("audit", by="bob", ahead=True, run="r1")
    with pytest.raises(oncelog.RunHalted), ledger.run("r1", agent="mailer") as run:
        run.read("look", lambda: 1)
    [notice] = got
    ledger.clear_halt(by="erin", run="r1")
    second = ledger.halt("fraud review", by="erin", run="r1")
    with pytest.raises(oncelog.UnknownHalt, match="set after it"):
        ledger.clear_halt(by="dana", run="r1", switch=first.id)
    assert [h.id for h in ledger.halts()] == [second.id]
    with console_client(ledger, login=False) as person:
        _, _, csrf = opened(person, (notice.links or {})["resume"])
        assert csrf is None, "a link to a cleared switch offers no form"
    assert [h.id for h in ledger.halts()] == [second.id]
