"""The page a notice's signed link opens: the one decision it names, and the one
confirming click that makes it.

The link is the credential for that decision alone, taken once (no console login is
needed: the person came from the notice), so its page shows that decision only, and a GET
never changes anything: a chat client that previews the link decides nothing. The
confirming POST carries a CSRF token bound to the link and must come from the console's
own origin, as every other form does. The decision is the one the link signs (``deny``,
``not_done``, ...), never one the form names: a form that names another is refused, with
nothing recorded; the form gives only what the decision needs from the person (a name, a
note, the result of a "done", an approve link's edited arguments). It is made through the
same ``Ledger`` calls as the console's other forms, bound to what the link names (the
attempt, the request and its arguments hash, the switch) and to the link itself (``link=``
its nonce: the store takes the link in the decision's transaction, so two confirmations at
once record one decision), and journalled with the person's name and the link's nonce; once anything
decided it, the page says who did, when, and what happens next.

Counted from the notice, a decision that needs nothing typed is two actions (open,
confirm): the person's name is remembered by this browser from its first decision (a
cookie of the link pages, prefilled and editable), and "done" offers "no result" on its
own button beside the one that takes the provider's answer. A value to type makes three:
the name the first time, the answer, an edited argument, or the note a retry needs (the
CLI's ``--why``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from oncelog import (
    ApprovalStatus,
    DecisionLink,
    Ledger,
    LinkRefused,
    OnceLogError,
    Resolution,
    RunStatus,
    StepState,
    UnknownName,
)
from oncelog.display import evidence_urls, exact_json

from ._actions import _result_of
from ._forms import MAX_NAME_CHARS, Form, FormError
from ._guard import LINK_PREFIX
from ._pages import describe, status_for
from ._state import Console, console_of

# The name a person last decided with from this browser: a prefill, never a credential
# (the page shows it, editable, and the link alone grants the decision). Chromium keeps a
# cookie 400 days at most.
NAME_SECONDS = 400 * 24 * 3600


@dataclass(frozen=True)
class Decided:
    """Who made the decision a link named, and when (None: unknown, e.g. it moved on)."""

    by: str | None
    at: float | None
    what: str


def routes() -> list[Route]:
    return [Route(LINK_PREFIX + "{token:path}", link_page, methods=["GET", "POST"])]


async def link_page(request: Request) -> Response:
    console = console_of(request)
    token = request.path_params["token"]
    try:
        link = await run_in_threadpool(console.ledger.check_link, token)
    except LinkRefused as exc:
        return _render(request, console, {"refused": str(exc), "command": exc.command}, 410)
    except OnceLogError as exc:  # no link secret here (a PostgreSQL ledger without one)
        return _render(request, console, {"refused": str(exc).rstrip(".")}, 503)
    csrf = _csrf(console, link)
    if request.method == "GET":
        context = await run_in_threadpool(_state, console.ledger, link)
        typed = {"by": _remembered(request, console)}
        return _render(request, console, {**context, "link_csrf": csrf, "typed": typed}, 200)
    form_data = await request.form(max_files=0, max_fields=20)
    given = form_data.get("csrf")
    if not isinstance(given, str) or not hmac.compare_digest(given.encode(), csrf.encode()):
        context = {"refused": "Missing or wrong CSRF token: open the link again and confirm"}
        return _render(request, console, {**context, "command": None}, 403)
    form = Form(form_data)
    try:
        await run_in_threadpool(_decide, console.ledger, link, form)
    except OnceLogError as exc:
        context = await run_in_threadpool(_state, console.ledger, link)
        typed = {k: v for k, v in form_data.items() if k != "csrf" and isinstance(v, str)}
        context.update(link_csrf=csrf, error=describe(exc), typed=typed)
        # Decided meanwhile (through this link or otherwise): whichever check saw it first,
        # the answer is the same one, "already decided", a conflict.
        status = 409 if context.get("decided") is not None else status_for(exc)
        return _render(request, console, context, status)
    context = await run_in_threadpool(_state, console.ledger, link)
    context.update(link_csrf=csrf, confirmed=True)
    response = _render(request, console, context, 200)
    response.set_cookie(
        _name_cookie(console), quote(form.person(), safe=""), max_age=NAME_SECONDS,
        path=LINK_PREFIX, secure=request.url.scheme == "https", httponly=True, samesite="lax",
    )  # fmt: skip
    return response


def _name_cookie(console: Console) -> str:
    # Per console, as its session cookie is: cookies are per host, not per port.
    return f"{console.access.cookie_name}_name"


def _remembered(request: Request, console: Console) -> str:
    """The name this browser last decided with, if any (Lax: the cookie comes along when
    the link is opened from a chat client, a top-level navigation)."""
    name = unquote(request.cookies.get(_name_cookie(console), ""))
    return name if len(name) <= MAX_NAME_CHARS else ""


def _csrf(console: Console, link: DecisionLink) -> str:
    key = console.access.token.encode()
    return hmac.new(key, f"link-csrf:{link.nonce}".encode(), hashlib.sha256).hexdigest()


def _render(request: Request, console: Console, context: dict[str, Any], status: int) -> Response:
    defaults: dict[str, Any] = {
        "page": "link", "error": None, "notice": None, "refused": None, "command": None,
        "decided": None, "confirmed": False, "typed": {}, "link": None, "subject": None,
        "next_lines": [], "csrf": None, "link_csrf": None, "editable": None,
    }  # fmt: skip
    response: Response = console.templates.TemplateResponse(
        request, "link.html", {**defaults, **context}, status_code=status
    )
    return response


def _state(ledger: Ledger, link: DecisionLink) -> dict[str, Any]:
    """The link's decision as the ledger holds it now: still open, with what to show, or
    decided (by whom, when), with what happens next."""
    try:
        subject, decided = _look(ledger, link)
        used = ledger.used_link(link.nonce)
        if used is not None:  # whatever the records look like now, the link is spent
            decided = Decided(used.by, used.at, used.decision)
        next_lines = ledger.what_next(link.run_id)
    except UnknownName as exc:
        return {"refused": f"{exc} (the run may have been pruned)", "command": None}
    context = {"link": link, "subject": subject, "decided": decided, "next_lines": next_lines}
    if decided is None and link.action == "approval" and link.choice == "approve":
        editable = _editable(ledger, link)
        context["editable"] = None if editable is None else exact_json(editable)
    return context


def _editable(ledger: Ledger, link: DecisionLink) -> dict[str, Any] | None:
    """The call an approve link's request asks for, by parameter name, as the console's
    form offers it for editing (None: its tool's calls cannot be edited)."""
    for approval in ledger.approvals(ApprovalStatus.PENDING, limit=100_000):
        if approval.id == link.number and approval.run_id == link.run_id:
            return ledger.editable_arguments(approval)
    return None


def _look(ledger: Ledger, link: DecisionLink) -> tuple[dict[str, Any], Decided | None]:
    if link.action == "approval":
        for approval in ledger.approvals(None, limit=100_000):
            if approval.id == link.number and approval.run_id == link.run_id:
                subject: dict[str, Any] = {"tool": approval.tool, "args_json": approval.args_json}
                if approval.status is ApprovalStatus.PENDING:
                    return subject, None
                return subject, Decided(
                    approval.decided_by, approval.decided_at, approval.status.value
                )
        return {}, Decided(None, None, "no such request any more")
    if link.action == "resume":
        for halt in ledger.halts(active_only=False, limit=100_000):
            if halt.id == link.number:
                found: dict[str, Any] = {"reason": halt.reason, "set_by": halt.set_by}
                if halt.active:
                    return found, None
                return found, Decided(halt.cleared_by, halt.cleared_at, "cleared")
        return {}, Decided(None, None, "no such kill switch any more")
    steps = [s for s in ledger.steps(link.run_id) if s.step_id == link.step_id]
    if not steps:
        return {}, Decided(None, None, "no such step any more")
    step = steps[0]
    evidence = evidence_urls(ledger.iter_journal(link.run_id)).get(link.step_id)
    shown: dict[str, Any] = {
        "tool": step.tool, "key": step.key, "args_json": step.args_json, "reason": step.reason,
        "attempt": step.attempts, "evidence_url": evidence,
    }  # fmt: skip
    in_doubt = any(
        (s.run_id, s.step_id) == (link.run_id, link.step_id) for s in ledger.in_doubt(limit=100_000)
    )
    if link.action == "retry":
        refused = step.state in (StepState.FAILED, StepState.NOT_DONE)
        ended = ledger.get_run(link.run_id).status is RunStatus.FAILED
        if refused and ended and step.attempts == link.number:
            return shown, None
    elif in_doubt and step.attempts == link.number:
        return shown, None
    return shown, _resolved_by(ledger, link, step.seq, step.state.value)


def _resolved_by(ledger: Ledger, link: DecisionLink, seq: int, state: str) -> Decided:
    """The last person's decision journalled on the step, or what it is now."""
    last: Decided | None = None
    for entry in ledger.iter_journal(link.run_id):
        if entry.seq == seq and entry.event in ("resolved", "corrected"):
            last = Decided(entry.data.get("by"), entry.at, str(entry.data.get("resolution")))
        elif entry.seq == seq and entry.event == "retried":
            last = Decided(entry.data.get("by"), entry.at, "retried")
    return last or Decided(None, None, f"the step is {state} now")


# The form fields that name a decision: a link's form may repeat its own, never another.
_CHOICE_FIELDS = ("decision", "resolution")


def _decide(ledger: Ledger, link: DecisionLink, form: Form) -> None:
    """The decision the link signs, with what the person confirmed; refused (nothing
    recorded) if the form names another."""
    for field in _CHOICE_FIELDS:
        asked = form.text(field)
        if asked and asked != link.choice:
            raise FormError(
                f"this link decides {link.choice!r} and nothing else, but the form asks for "
                f"{asked!r}: nothing is recorded. To decide {asked!r}, use the notice's "
                f"{asked!r} link, or log in to the console and decide from its pages"
            )
    by = form.person()
    note = f"through the notice's link {link.nonce}"
    if form.optional("note"):
        note = f"{form.text('note')} ({note})"
    if link.action == "approval":
        edited = _edited(ledger, link, form)
        if link.choice == "deny":
            ledger.deny(link.run_id, link.step_id, by=by, note=note, request=link.number,
                        args_hash=link.args_hash, link=link.nonce)  # fmt: skip
            return
        # Bound to the request and arguments hash the link signs, edited or not: the
        # edit is the approve link's to make, checked by the ledger as the console's is.
        ledger.approve(link.run_id, link.step_id, by=by, note=note, request=link.number,
                       args_hash=link.args_hash, link=link.nonce, args=edited)  # fmt: skip
        return
    if link.action == "resume":
        halts = [h for h in ledger.halts() if h.id == link.number]
        if not halts:
            raise FormError("this kill switch is cleared already")
        ledger.clear_halt(by=by, run=link.run_id, note=note, link=link.nonce, switch=link.number)
        return
    if link.action == "retry":
        if not form.optional("note"):
            raise FormError(
                "a retry needs a note: why it is safe to send it again now (as `oncelog "
                "retry --why`); nothing is recorded"
            )
        # Bound to the attempts the notice saw: a retry made since reset them.
        steps = [s for s in ledger.steps(link.run_id) if s.step_id == link.step_id]
        if not steps or steps[0].attempts != link.number:
            raise FormError("this step was retried already: open the link again to see by whom")
        ledger.retry(link.run_id, link.step_id, by=by, why=note, link=link.nonce)
        return
    resolution = Resolution(link.choice)
    ledger.resolve(
        link.run_id, link.step_id, resolution, by=by, result=_result_of(form, resolution),
        note=note, attempt=link.number, link=link.nonce,
    )  # fmt: skip


def _edited(ledger: Ledger, link: DecisionLink, form: Form) -> str | None:
    """The edited call an approve link's form sends, if the person changed it (None: the
    request as asked). A deny link edits nothing."""
    given = form.text("args")
    if not given:
        return None
    if link.choice != "approve":
        raise FormError(
            "a deny link cannot edit the arguments: nothing is recorded. To approve an "
            "edited call, use the notice's approve link"
        )
    try:
        unchanged = json.loads(given) == _editable(ledger, link)
    except (ValueError, RecursionError):
        unchanged = False  # the ledger says what is wrong with it
    return None if unchanged else given
