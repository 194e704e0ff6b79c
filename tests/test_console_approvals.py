"""The console decides exactly what its page showed: the request under the button, ids as
stored, and arguments shown whole with only declared secrets hidden. Forms are posted
with the hidden fields the page itself rendered, as a browser would."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest

import oncelog

from .support.console_client import Person, console_client, store_state
from .support.incidents import effect_in_doubt

FORM = re.compile(r'<form method="post" action="([^"]+)">(.*?)</form>', re.S)
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def forms(person: Person, page: str, action: str) -> list[dict[str, str]]:
    """The hidden fields of each form on ``page`` that posts to ``action``."""
    found = []
    for target, body in FORM.findall(person.get(page).text):
        if target == action:
            fields = {name: html.unescape(value) for name, value in HIDDEN.findall(body)}
            fields.pop("csrf")
            found.append(fields)
    return found


def ask_to_delete(ledger: oncelog.Ledger, run_id: str, env: str, **more: str) -> None:
    @ledger.tool(kind="destructive", name="delete_env", secret=("password",))
    def delete_env(env: str, *, idempotency_key: str, **more: str) -> str:
        return env

    with pytest.raises(oncelog.ApprovalRequired), ledger.run(run_id) as run:
        run.effect("delete", delete_env, env, **more)


@pytest.fixture
def ledger(store_url: str) -> Iterator[oncelog.Ledger]:
    """A ledger whose tools may declare secret fields."""
    with oncelog.open(store_url, redaction_key="test-redaction-key") as opened:
        yield opened


def test_the_button_under_the_staging_request_never_approves_production(
    ledger: oncelog.Ledger,
) -> None:
    ask_to_delete(ledger, "r1", "staging")
    with console_client(ledger) as person:
        [staging_form] = forms(person, "/approvals", "/approvals/decide")
        ask_to_delete(ledger, "r1", "production")  # the agent restarted while the page was open
        before = store_state(ledger)
        for choice in ("approve", "deny"):
            response = person.post(
                "/approvals/decide", {**staging_form, "by": "alice", "decision": choice}
            )
            assert response.status_code == 409
            assert "superseded" in response.text
        assert store_state(ledger) == before
        [production_form] = forms(person, "/approvals", "/approvals/decide")
        assert production_form["request"] != staging_form["request"]
        assert '"production"' in html.unescape(person.get("/approvals").text)
        response = person.post(
            "/approvals/decide", {**production_form, "by": "alice", "decision": "approve"}
        )
        assert response.status_code == 303
    [approved] = ledger.approvals("approved")
    assert approved.args_json == '{"args":["production"],"kwargs":{}}'
    [entry] = [e for e in ledger.journal("r1") if e.event == "approval_approved"]
    assert (entry.data["request"], entry.data["args_hash"]) == (approved.id, approved.args_hash)


def test_ids_are_taken_exactly_as_stored(ledger: oncelog.Ledger) -> None:
    for run_id in ("victim", "victim "):
        ask_to_delete(ledger, run_id, "staging")
    with console_client(ledger) as person:
        page = person.get("/approvals").text
        assert "&#34;victim &#34;" in page  # the trailing space is shown, not just kept
        [form] = [
            f for f in forms(person, "/approvals", "/approvals/decide") if f["run_id"] != "victim"
        ]
        assert form["run_id"] == "victim "
        posted = person.post("/approvals/decide", {**form, "by": "alice", "decision": "approve"})
        assert posted.status_code == 303
    assert [(a.run_id, a.status.value) for a in ledger.approvals(None)] == [
        ("victim ", "approved"), ("victim", "pending"),
    ]  # fmt: skip


def test_resolve_and_clear_take_ids_exactly_as_stored(ledger: oncelog.Ledger) -> None:
    for run_id in ("victim", "victim "):
        effect_in_doubt(ledger, run_id)
        ledger.halt("investigating", by="oncall", run=run_id)
    with console_client(ledger) as person:
        [resolve] = [
            f for f in forms(person, "/unknown", "/unknown/resolve") if f["run_id"] != "victim"
        ]
        posted = person.post("/unknown/resolve", {**resolve, "resolution": "abandon", "by": "bob"})
        assert posted.status_code == 303
        [clear] = [f for f in forms(person, "/halts", "/halts/clear") if f["target"] != "victim"]
        assert person.post("/halts/clear", {**clear, "by": "erin"}).status_code == 303
    assert [(s.run_id, s.state.value) for s in ledger.in_doubt()] == [("victim", "unknown")]
    assert [h.target for h in ledger.halts()] == ["victim"]


def test_the_approval_page_hides_nothing_but_declared_secrets(ledger: oncelog.Ledger) -> None:
    long_value = "row-" + "x" * 30_000 + "-last"
    ask_to_delete(
        ledger, "r1", "staging", x_token_target="prod-db-7", password="hunter2",
        label="prod\u202eging", rows=long_value,
    )  # fmt: skip
    with console_client(ledger) as person:
        page = html.unescape(person.get("/approvals").text)
    assert "prod-db-7" in page  # a key that merely looks secret is shown
    assert "hunter2" not in page  # a declared secret never reached the ledger
    assert '"password": "redacted:' in page
    assert "prod\\u202eging" in page  # an invisible control shown as what it is
    assert "\u202e" not in page
    assert long_value in page  # in full, on demand
    assert "only the first" in page
    assert "<details>" in page


def ask_to_refund(ledger: oncelog.Ledger, run_id: str, amount: int) -> None:
    @ledger.tool(kind="payment", name="refund", approval=lambda order, amount: amount > 100)
    def refund(order: str, amount: int, *, idempotency_key: str) -> dict[str, object]:
        return {"order": order, "amount": amount}

    with pytest.raises(oncelog.ApprovalRequired), ledger.run(run_id) as run:
        run.effect("refund", refund, "o-1", amount)


def test_an_approval_with_edited_arguments_shows_what_it_changed(
    ledger: oncelog.Ledger,
) -> None:
    ask_to_refund(ledger, "r1", 150)
    with console_client(ledger) as person:
        page = person.get("/approvals").text
        assert "Approve with edited arguments" in page
        assert "&#34;amount&#34;: 150" in page or "&quot;amount&quot;: 150" in page
        [form] = forms(person, "/approvals", "/approvals/decide")
        bad = person.post(
            "/approvals/decide",
            {**form, "by": "alice", "decision": "approve_edited", "args": '{"order": "o-1"}'},
        )
        assert bad.status_code == 400
        assert "missing parameter" in bad.text
        assert '{"order": "o-1"}' in html.unescape(bad.text)  # what was typed comes back
        edited = '{"order": "o-1", "amount": 100}'
        done = person.post(
            "/approvals/decide",
            {**form, "by": "alice", "decision": "approve_edited", "args": edited},
        )
        assert done.status_code == 303, done.text
        assert "amount: 150 → 100" in html.unescape(person.get("/approvals").text)
    statuses = sorted(a.status.value for a in ledger.approvals(None))
    assert statuses == ["approved", "edited"]


def test_a_tool_taking_kwargs_offers_no_edit(ledger: oncelog.Ledger) -> None:
    ask_to_delete(ledger, "r1", "staging")
    with console_client(ledger) as person:
        assert "Approve with edited arguments" not in person.get("/approvals").text
