"""The web console against a real SQLite ledger, through Starlette's TestClient: who may
use it, from where, with which proof; and what each action changes and records."""

from __future__ import annotations

import hashlib
import hmac
import html
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli
from oncelog.console import Access, console_token

from .support.console_client import BASE, TOKEN, Person, console_client, store_state
from .support.incidents import (
    approval_pending,
    count_twice,
    effect_in_doubt,
    effect_killed_in_flight,
    over_budget,
)
from .support.launch import python

PAGES = ["/", "/runs", "/runs/r-delete", "/approvals", "/unknown", "/halts", "/budgets", "/holds"]
ACTIONS = [
    "/approvals/decide",
    "/unknown/resolve",
    "/halts/set",
    "/halts/clear",
    "/budgets/run",
    "/budgets/agent",
    "/holds/release",
    "/steps/retry",
]
FOREIGN = "http://evil.example"
# The hidden fields of r-mail's resolve form: its step, and the attempt the page shows.
MAIL_FORM = {"run_id": "r-mail", "step_id": "email", "attempt": "1"}


@pytest.fixture
def busy(ledger: oncelog.Ledger) -> oncelog.Ledger:
    """A ledger with something for every page: an approval, an effect in doubt, a budget."""
    approval_pending(ledger)
    effect_in_doubt(ledger)
    over_budget(ledger)
    return ledger


def decision(ledger: oncelog.Ledger, by: str, choice: str, **more: str) -> dict[str, str]:
    """The form under the one pending request: its ids, as the page's hidden fields hold them."""
    [asked] = ledger.approvals()
    return {
        "run_id": asked.run_id, "step_id": asked.step_id, "request": str(asked.id),
        "args_hash": asked.args_hash, "by": by, "decision": choice, **more,
    }  # fmt: skip


@pytest.fixture
def person(busy: oncelog.Ledger) -> Iterator[Person]:
    with console_client(busy) as logged_in:
        yield logged_in


# -- who may come in -----------------------------------------------------------------------


def test_nothing_is_served_without_a_login(busy: oncelog.Ledger) -> None:
    with console_client(busy, login=False) as stranger:
        for path in PAGES:
            assert stranger.get(path).status_code == 401, path
        # The stylesheet holds nothing of the ledger (the 401 above names oncelog anyway),
        # and the page a notice's signed link opens, without a login, needs it.
        assert stranger.get("/static/console.css").status_code == 200
        for path in [*ACTIONS, "/logout"]:
            sent = stranger.client.post(path, data={"by": "x"}, headers={"Origin": BASE})
            assert sent.status_code == 401, path
        assert stranger.get("/login?token=wrong").status_code == 401
        assert stranger.get("/login").status_code == 401
        assert stranger.get(f"/login?token={TOKEN}x").status_code == 401
        assert "Not logged in" in stranger.get("/").text


def test_login_sets_a_strict_http_only_session_cookie(busy: oncelog.Ledger) -> None:
    with console_client(busy, login=False) as visitor:
        response = visitor.get(f"/login?token={TOKEN}")
        assert response.status_code == 303
        assert response.headers["location"] == "/"  # the token leaves the address bar
        cookie = response.headers["set-cookie"]
        assert cookie.startswith("oncelog_console_8470=")
        assert "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        assert TOKEN not in cookie
        for path in PAGES:
            assert visitor.get(path).status_code == 200, path


def test_forged_tampered_and_expired_cookies_are_refused(busy: oncelog.Ledger) -> None:
    access = Access.for_address(TOKEN, "127.0.0.1", 8470)
    other = Access.for_address("another-token-" + "y" * 40, "127.0.0.1", 8470)
    good = access.new_session()
    session, issued, mac = good.split(".")
    old = f"{session}.{int(time.time()) - 13 * 3600}"
    old_mac = hmac.new(TOKEN.encode(), f"session:{old}".encode(), hashlib.sha256).hexdigest()
    assert access.session(good) == session
    for bad in (
        other.new_session(),  # signed with another token: a rotated one ends every session
        f"{session}x.{issued}.{mac}",
        f"{session}.{issued}.{'0' * 64}",
        f"{old}.{old_mac}",
        "garbage",
    ):
        assert access.session(bad) is None, bad
        with console_client(busy, login=False) as visitor:
            visitor.client.cookies.set(access.cookie_name, bad)
            assert visitor.get("/").status_code == 401


def test_a_foreign_host_header_is_refused(person: Person) -> None:
    """DNS rebinding: a page at evil.example resolving to 127.0.0.1 sends its own Host."""
    for host in ("evil.example:8470", "evil.example", "127.0.0.1:9999", ""):
        assert person.get("/", headers={"Host": host}).status_code == 400, host
    assert person.get("/", headers={"Host": "localhost:8470"}).status_code == 200


def test_logout_ends_the_session(person: Person) -> None:
    response = person.post("/logout", {})
    assert response.status_code == 200
    assert 'oncelog_console_8470=""' in response.headers["set-cookie"]
    assert person.get("/").status_code == 401


# -- which requests may change anything ----------------------------------------------------


def test_a_post_from_another_origin_is_refused(busy: oncelog.Ledger, person: Person) -> None:
    before = store_state(busy)
    form = decision(busy, "mallory", "approve")
    for headers in (
        {"Origin": FOREIGN},
        {"Origin": "null"},
        {"Referer": f"{FOREIGN}/page"},
        {},  # neither Origin nor Referer
        {"Origin": BASE, "Sec-Fetch-Site": "cross-site"},
    ):
        assert person.post("/approvals/decide", form, headers=headers).status_code == 403, headers
    assert store_state(busy) == before
    # A client that sends no Origin but a same-origin Referer is let through.
    response = person.post("/approvals/decide", form, headers={"Referer": f"{BASE}/approvals"})
    assert response.status_code == 303


@pytest.mark.parametrize("csrf", [None, "", "wrong", "other-session"])
def test_a_missing_or_wrong_csrf_token_is_refused(
    busy: oncelog.Ledger, person: Person, csrf: str | None
) -> None:
    before = store_state(busy)
    form = {"run_id": "r-delete", "step_id": "delete", "by": "mallory", "decision": "approve"}
    if csrf == "other-session":
        csrf = Access.for_address(TOKEN, "127.0.0.1", 8470).csrf_token("someone-else")
    if csrf is not None:
        form["csrf"] = csrf
    response = person.client.post(
        "/approvals/decide", data=form, headers={"Origin": BASE}, follow_redirects=False
    )
    assert response.status_code == 403
    assert "CSRF" in response.text
    assert store_state(busy) == before


def test_get_changes_nothing(busy: oncelog.Ledger, person: Person) -> None:
    before = store_state(busy)
    query = {
        "run_id": "r-delete", "step_id": "delete", "by": "mallory", "decision": "approve",
        "resolution": "done", "scope": "global", "reason": "x", "csrf": person.csrf(),
    }  # fmt: skip
    for path in PAGES:
        assert person.get(path, params=query).status_code == 200, path
    for path in ACTIONS:
        assert person.get(path, params=query).status_code == 405, path
    assert store_state(busy) == before


def test_every_response_carries_the_security_headers(person: Person) -> None:
    responses = [
        person.get("/"),
        person.get("/static/console.css"),
        person.get(f"/login?token={TOKEN}"),
        person.get("/", headers={"Host": "evil.example"}),
    ]
    person.client.cookies.clear()
    responses.append(person.get("/"))
    assert [r.status_code for r in responses] == [200, 200, 303, 400, 401]
    for response in responses:
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
        assert response.headers["cache-control"] == "no-store"


# -- what agents wrote is shown as text ----------------------------------------------------


def test_agent_output_is_shown_as_text_and_secrets_are_masked(ledger: oncelog.Ledger) -> None:
    script = "<script>alert(1)</script>"
    approval_pending(ledger, f"r-{script}", note=script, api_key="sk_live_SECRET1")
    effect_in_doubt(ledger, "r-mail", said=script)
    ledger.halt(f"halted by {script}", by=script, run="r-mail")

    @ledger.tool(kind="create", name="store_card")
    def store_card(owner: str, *, idempotency_key: str, **card: str) -> dict[str, str]:
        return {"owner": owner, "password": "hunter2-SECRET2", "card": card["card_number"]}

    with ledger.run("r-card") as run:
        run.effect(script, store_card, script, card_number="4242-SECRET3")

    with console_client(ledger) as person:
        pages = ["/", "/runs", "/approvals", "/unknown", "/halts", "/runs/r-card", "/runs/r-mail"]
        for path in pages:
            text = person.get(path).text
            assert "<script>alert" not in text, path
            # The approval page shows what is approved whole: only declared secrets are
            # hidden there (and they are never recorded); everywhere else a secret-looking
            # key is masked.
            assert ("SECRET" in text) is (path == "/approvals"), path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in person.get("/approvals").text
        assert "&lt;script&gt;" in person.get("/unknown").text
        card = person.get("/runs/r-card").text
        assert "••••••" in card
        assert "&lt;script&gt;" in card


# -- each action changes the store and records who did it ----------------------------------


def test_approve_records_the_approver_and_lets_the_effect_run_once(
    busy: oncelog.Ledger, person: Person
) -> None:
    form = decision(busy, "alice", "approve")
    response = person.post("/approvals/decide", {**form, "expires_in_minutes": "30"})
    assert (response.status_code, response.headers["location"]) == (
        303, "/approvals?done=approved&run=r-delete"
    )  # fmt: skip
    banner = person.get(response.headers["location"]).text
    assert "Run r-delete: Approved" in banner
    assert "Next: the run r-delete is queued: restart its agent" in banner
    [decided] = busy.approvals(None)
    assert (decided.status, decided.decided_by) == (oncelog.ApprovalStatus.APPROVED, "alice")
    assert decided.expires_at is not None
    assert decided.decided_at is not None
    assert abs(decided.expires_at - decided.decided_at - 30 * 60) < 1
    [entry] = [e for e in busy.journal("r-delete") if e.event == "approval_approved"]
    assert entry.data["by"] == "alice"
    deleted: list[str] = []

    @busy.tool(kind="destructive", name="delete_account")
    def delete_account(account: str, *, idempotency_key: str) -> str:
        deleted.append(account)
        return account

    with busy.run("r-delete") as run:
        run.effect("delete", delete_account, "acct_1")
    assert deleted == ["acct_1"]
    # Approving again: someone else already decided and it was used; the page says so.
    response = person.post("/approvals/decide", form)
    assert response.status_code == 409
    assert "UnknownApproval" in response.text


def test_deny_records_who_and_why(busy: oncelog.Ledger, person: Person) -> None:
    form = decision(busy, "carol", "deny")
    assert person.post("/approvals/decide", {**form, "note": "keep it"}).status_code == 303
    [decided] = busy.approvals(None)
    assert (decided.status, decided.decided_by, decided.note) == (
        oncelog.ApprovalStatus.DENIED, "carol", "keep it",
    )  # fmt: skip


def test_resolve_as_done_records_the_result_and_who(busy: oncelog.Ledger, person: Person) -> None:
    unknown = person.get("/unknown").text
    assert "no answer from the mail provider" in unknown  # the recorded reason
    assert "a@example.com" in unknown  # the intent's arguments
    form = {**MAIL_FORM, "resolution": "done", "by": "bob"}
    response = person.post("/unknown/resolve", {**form, "result": '{"id": "msg_1"}'})
    assert response.status_code == 303
    [step] = busy.steps("r-mail")
    assert (step.state, step.result) == (oncelog.StepState.DONE, {"id": "msg_1"})
    [entry] = [e for e in busy.journal("r-mail") if e.event == "resolved"]
    assert (entry.data["by"], entry.data["resolution"]) == ("bob", "done")
    assert busy.get_run("r-mail").status is not oncelog.RunStatus.HALTED  # released
    assert busy.in_doubt() == []
    banner = person.get(response.headers["location"]).text  # names the run, says what next
    assert "Run r-mail: Decision recorded in the run&#39;s journal. Next: the run r-mail" in banner


@pytest.mark.parametrize(
    ("resolution", "state"),
    [("not_done", oncelog.StepState.NOT_DONE), ("abandon", oncelog.StepState.ABANDONED)],
)
def test_resolve_an_effect_left_by_a_killed_process(
    ledger: oncelog.Ledger,
    db_path: str,
    tmp_path: Path,
    resolution: str,
    state: oncelog.StepState,
) -> None:
    effect_killed_in_flight(db_path, tmp_path)
    with console_client(ledger) as person:
        assert "its outcome was never recorded" in person.get("/unknown").text
        form = {
            "run_id": "r-killed",
            "step_id": "email-0",
            "attempt": "1",
            "resolution": resolution,
        }
        assert person.post("/unknown/resolve", {**form, "by": "dan"}).status_code == 303
    [step] = ledger.steps("r-killed")
    assert step.state is state
    [entry] = [e for e in ledger.journal("r-killed") if e.event == "resolved"]
    assert entry.data["by"] == "dan"


def test_done_with_no_result_gives_the_agent_no_result(
    busy: oncelog.Ledger, person: Person
) -> None:
    assert "oncelog.NO_RESULT" in person.get("/unknown").text
    form = {**MAIL_FORM, "resolution": "done", "by": "bob"}
    assert person.post("/unknown/resolve", {**form, "no_result": "yes"}).status_code == 303
    [step] = busy.steps("r-mail")
    assert (step.state, step.result) == (oncelog.StepState.DONE, oncelog.NO_RESULT)
    [entry] = [e for e in busy.journal("r-mail") if e.event == "resolved"]
    assert entry.data["no_result"] is True
    assert "NO_RESULT" in person.get("/runs/r-mail").text


@pytest.mark.parametrize("typed", ["250 2.0.0 Ok: queued as 4F2A1", "1", '{"id": "msg_1"}'])
def test_done_with_a_plain_text_result_gives_the_agent_that_string(
    busy: oncelog.Ledger, person: Person, typed: str
) -> None:
    assert 'name="as_text"' in person.get("/unknown").text
    form = {**MAIL_FORM, "resolution": "done", "by": "bob"}
    assert (
        person.post("/unknown/resolve", {**form, "result": typed, "as_text": "yes"}).status_code
        == 303
    )
    [step] = busy.steps("r-mail")
    assert (step.state, step.result) == (oncelog.StepState.DONE, typed)  # text, even if JSON
    [entry] = [e for e in busy.journal("r-mail") if e.event == "resolved"]
    assert entry.data["by"] == "bob"


def test_a_step_a_live_process_is_running_is_resolved_only_by_force(
    ledger: oncelog.Ledger,
) -> None:
    answers = []
    with console_client(ledger) as person:

        @ledger.tool(kind="create", name="send")
        def send(*, idempotency_key: str) -> str:
            form = {
                "run_id": "r-live",
                "step_id": "send",
                "attempt": "1",
                "resolution": "not_done",
                "by": "b",
            }
            page = person.get("/unknown").text
            answers.append((page, person.post("/unknown/resolve", form)))
            answers.append((page, person.post("/unknown/resolve", {**form, "force": "yes"})))
            return "sent"

        with pytest.raises(oncelog.LeaseLost), ledger.run("r-live") as run:
            run.effect("send", send)
    (page, refused), (_, forced) = answers
    assert 'name="force"' in page
    assert refused.status_code == 409
    assert "RunLeased" in html.unescape(refused.text)
    assert forced.status_code == 303
    [entry] = [e for e in ledger.journal("r-live") if e.event == "resolved"]
    assert entry.data["forced"].split("|")[1] == str(os.getpid())


DEEP = "[" * 60_000 + "]" * 60_000  # Python's JSON decoder recurses per level


def test_bad_input_is_explained_and_changes_nothing(busy: oncelog.Ledger, person: Person) -> None:
    before = store_state(busy)
    resolve = {**MAIL_FORM, "resolution": "done", "by": "bob"}
    cases = [
        ("/unknown/resolve", {**resolve, "result": "{not json"}, "not JSON"),
        ("/unknown/resolve", {**resolve, "result": DEEP}, "nested too deeply"),
        ("/approvals/decide", {**decision(busy, "a", "approve_edited"), "args": f'{{"x": {DEEP}}}'},
         "nested more than 200 levels deep"),
        ("/holds/release", {"resource": DEEP, "by": "a", "why": "w"}, "not a hold's name"),
        ("/unknown/resolve", {**resolve, "by": "  "}, "by is required"),
        ("/unknown/resolve", {**resolve, "resolution": "maybe"}, "must be one of"),
        ("/unknown/resolve", {**resolve, "resolution": "abandon", "result": "1"}, "'done' only"),
        ("/unknown/resolve", resolve, "needs the provider's result"),
        ("/unknown/resolve", {**resolve, "result": "1", "no_result": "yes"}, "not both"),
        ("/unknown/resolve", {**resolve, "resolution": "not_done", "no_result": "yes"},
         "'done' only"),
        ("/unknown/resolve", {**resolve, "resolution": "abandon", "as_text": "yes"}, "'done' only"),
        ("/unknown/resolve", {**resolve, "as_text": "yes", "no_result": "yes"},
         "not with “no result”"),
        ("/unknown/resolve", {**resolve, "as_text": "yes"}, "needs the provider's result"),
        ("/unknown/resolve", {**resolve, "attempt": ""}, "attempt is required"),
        ("/unknown/resolve", {**resolve, "attempt": "0"}, "not a number from 1"),
        ("/unknown/resolve", {**resolve, "attempt": "²"}, "not a number from 1"),
        ("/approvals/decide", decision(busy, "a", "approve", expires_in_minutes="-1"), ">= 0"),
        ("/approvals/decide", {**decision(busy, "a", "approve"), "request": ""},
         "request is required"),
        ("/approvals/decide", {**decision(busy, "a", "approve"), "request": "1 "},
         "not a request id"),
        ("/halts/set", {"scope": "global", "target": "r-mail", "reason": "x", "by": "a"},
         "leave the agent or run id empty"),
        ("/halts/set", {"scope": "agent", "reason": "x", "by": "a"}, "target is required"),
        ("/halts/set", {"scope": "run", "target": "r-mial", "reason": "x", "by": "a"},
         "did you mean 'r-mail'"),
        ("/halts/clear", {"scope": "global", "by": "a"}, "UnknownHalt"),
        ("/budgets/run", {"run_id": "nope", "by": "a"}, "no run named"),
    ]  # fmt: skip
    for path, form, says in cases:
        response = person.post(path, form)
        assert response.status_code in (400, 404, 409), (path, form)
        assert says in html.unescape(response.text), (path, form)
    assert store_state(busy) == before


def test_the_kill_switch_is_set_and_cleared_by_name(busy: oncelog.Ledger, person: Person) -> None:
    for scope, target in (("global", ""), ("agent", "mailer"), ("run", "r-mail")):
        form = {"scope": scope, "target": target, "reason": f"stop {scope}", "by": "oncall"}
        assert person.post("/halts/set", form).status_code == 303
    on = {(h.scope.value, h.target): h for h in busy.halts()}
    assert set(on) == {("global", ""), ("agent", "mailer"), ("run", "r-mail")}
    assert {h.set_by for h in on.values()} == {"oncall"}
    assert "stop agent" in person.get("/halts").text
    with pytest.raises(oncelog.RunHalted), busy.run("r-other") as run:
        run.read("q", lambda: 1)
    form = {"scope": "global", "target": "", "by": "erin", "note": "provider fixed"}
    assert person.post("/halts/clear", form).status_code == 303
    [cleared] = [h for h in busy.halts(active_only=False) if h.scope.value == "global"]
    assert (cleared.cleared_by, cleared.note) == ("erin", "provider fixed")
    events = [(e.event, e.data["by"]) for e in busy.journal("") if e.event.startswith("halt")]
    assert ("halt_set", "oncall") in events
    assert ("halt_cleared", "erin") in events
    assert len(busy.halts()) == 2
    ahead = {"scope": "run", "target": "r-next", "reason": "not yet", "by": "oncall",
             "ahead": "yes"}  # fmt: skip
    assert person.post("/halts/set", ahead).status_code == 303  # a run not started yet
    assert ("run", "r-next") in {(h.scope.value, h.target) for h in busy.halts()}


def test_a_person_raises_a_budget(busy: oncelog.Ledger, person: Person) -> None:
    budgets = person.get("/budgets").text
    assert "r-budget" in budgets
    form = {"run_id": "r-budget", "steps": "5", "cost": "2.5", "by": "alice"}
    assert person.post("/budgets/run", form).status_code == 303
    budget = busy.get_run("r-budget").budget
    assert budget is not None
    assert (budget.steps, budget.cost, budget.tokens) == (5, 2.5, None)
    [entry] = [e for e in busy.journal("r-budget") if e.event == "budget_set"]
    assert entry.data["by"] == "alice"
    count_twice(busy, "r-budget")  # it goes on, to the end
    form = {"agent": "mailer", "calls": "100", "by": "ops"}
    assert person.post("/budgets/agent", form).status_code == 303
    assert person.post("/budgets/agent", {**form, "calls": "200", "by": "ops2"}).status_code == 303
    [entry] = [e for e in busy.journal("") if e.event == "agent_budget_set"][-1:]
    assert (entry.data["budget"]["calls"], entry.data["by"]) == (200, "ops2")
    assert "set by ops2" in person.get("/budgets").text


def test_pages_show_runs_and_timelines(busy: oncelog.Ledger, person: Person) -> None:
    halted = person.get("/runs?status=halted").text
    assert "r-mail" in halted
    assert "r-delete" not in halted
    assert person.get("/runs?status=bogus").status_code == 400
    timeline = person.get("/runs/r-budget").text
    for shown in ("one", "_count", "read", "steps 2 over", "run_created", "run_halted"):
        assert shown in timeline
    assert person.get("/runs/no-such-run").status_code == 404


# -- the token and the command -------------------------------------------------------------


def test_the_token_file_is_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "config" / "console-token"
    token = console_token(path)
    assert len(token) >= 43  # 32 random bytes, base64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert console_token(path) == token
    assert console_token(path, rotate=True) != token
    path.chmod(0o644)
    with pytest.raises(oncelog.ConfigurationError, match="readable by others"):
        console_token(path)


def test_without_the_extra_the_command_names_it(db_path: str) -> None:
    hide = "import sys; sys.modules['starlette'] = None; from oncelog.cli import main; main()"
    done = subprocess.run(
        python("-c", hide, "console", "--db", db_path),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert re.search(r"pip install '[^']*\[console\]'", done.stderr), done.stderr


def test_a_non_loopback_address_is_warned_about(db_path: str, tmp_path: Path) -> None:
    # 192.0.2.1 is a documentation address no interface has: the bind fails, cleanly.
    oncelog.open(db_path).close()  # the console serves an existing ledger only
    result = CliRunner().invoke(
        cli,
        ["console", "--host", "192.0.2.1", "--port", "0", "--db", db_path,
         "--token-file", str(tmp_path / "token")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "warning: listening on 192.0.2.1, not a loopback address" in result.output
    assert "cannot listen on 192.0.2.1:0" in result.output


def test_an_orphaned_effect_and_a_result_its_tool_refuses(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="create", name="send", result_schema={"type": "object"})
    def send(*, idempotency_key: str) -> None:
        raise KeyboardInterrupt  # the process stops mid-effect; its lease is let go

    with pytest.raises(KeyboardInterrupt), ledger.run("r-orphan") as run:
        run.effect("mail", send)
    with console_client(ledger) as person:
        page = person.get("/unknown").text
        assert 'class="state state-orphaned">orphaned</span>' in page
        assert "nobody is running it" in page
        form = {
            "run_id": "r-orphan",
            "step_id": "mail",
            "attempt": "1",
            "resolution": "done",
            "by": "eve",
        }
        refused = person.post("/unknown/resolve", {**form, "result": '"sent"'})
        assert "expected object, got str" in html.unescape(refused.text)
        assert ledger.steps("r-orphan")[0].state is oncelog.StepState.IN_FLIGHT
        accepted = person.post("/unknown/resolve", {**form, "result": '{"id": "m1"}'})
        assert accepted.status_code == 303
    assert ledger.steps("r-orphan")[0].result == {"id": "m1"}


# -- the operator's path (issue 17) ---------------------------------------------------------


def test_a_halted_runs_page_has_the_resolve_form(busy: oncelog.Ledger, person: Person) -> None:
    page = person.get("/runs/r-mail").text
    assert 'action="/unknown/resolve"' in page
    assert 'name="step_id" value="email"' in page
    form = {**MAIL_FORM, "resolution": "not_done", "by": "bob"}
    response = person.post("/unknown/resolve", form)
    assert response.status_code == 303
    assert 'action="/unknown/resolve"' not in person.get("/runs/r-mail").text
    # Until the agent takes it up again, the run stays in view on the start page.
    assert "Decided, not moved yet (1)" in person.get("/").text


def test_the_kill_switch_form_covers_one_run_unless_told(person: Person) -> None:
    page = person.get("/halts").text
    assert '<option value="run" selected>one run</option>' in page
    assert "global" in page.split('<option value="run" selected>', 1)[1]  # offered last


def test_runs_are_filtered_by_status_agent_and_text_and_refresh(person: Person) -> None:
    listed = person.get("/runs?agent=mailer").text
    assert "r-mail" in listed
    assert "r-delete" not in listed
    listed = person.get("/runs?q=BUDGET").text  # the run id, any case
    assert ("r-budget" in listed, "r-mail" in listed) == (True, False)
    listed = person.get("/runs?q=resolve&status=halted").text  # the reason
    assert "r-mail" in listed
    assert '<meta http-equiv="refresh" content="30">' in listed
    assert '<meta http-equiv="refresh"' in person.get("/").text


def test_the_why_column_is_the_message_not_a_repr(person: Person) -> None:
    listed = person.get("/runs").text
    assert "run_id=" not in listed
    assert "oncelog resolve r-mail email not_done --by NAME" in listed
