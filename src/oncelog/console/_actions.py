"""The changes a person makes: each one a POST with a CSRF token and the person's name,
turned into one library call whose ``by=`` the ledger records with the change."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from oncelog import NO_RESULT, AgentBudget, Budget, HaltScope, Ledger, OnceLogError, Resolution

from ._forms import Form, FormError, submitted
from ._pages import PAGES, describe, show, status_for
from ._state import console_of

# Does it; returns the notice to show and the run it concerns, if it concerns one run.
Change = Callable[[Form, Ledger], tuple[str, str | None]]


def decide_approval(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    """Decide the one request whose arguments the page showed: its id and arguments hash
    come with the form, so a newer request of the same step is never the one decided."""
    run_id, step_id = form.exact("run_id", required=True), form.exact("step_id", required=True)
    request, args_hash = form.request_id("request"), form.exact("args_hash", required=True)
    by, note = form.person(), form.optional("note")
    decision = form.choice("decision", ("approve", "approve_edited", "deny"))
    if decision == "deny":
        ledger.deny(run_id, step_id, by=by, note=note, request=request, args_hash=args_hash)
        return "denied", run_id
    minutes = form.number("expires_in_minutes")
    expires = None if minutes is None else timedelta(minutes=minutes)
    # The edited arguments go to the ledger as typed: it says what is wrong with them.
    edited = form.text("args", required=True) if decision == "approve_edited" else None
    ledger.approve(
        run_id, step_id, by=by, request=request, args_hash=args_hash, expires_in=expires,
        note=note, args=edited,
    )  # fmt: skip
    return "edited" if edited is not None else "approved", run_id


def resolve_effect(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    """Decide the attempt the page showed: its number comes with the form, so a decision
    made while looking at an attempt the step has since moved past is refused."""
    run_id, step_id = form.exact("run_id", required=True), form.exact("step_id", required=True)
    attempt = form.counted("attempt")
    resolution = Resolution(form.choice("resolution", tuple(r.value for r in Resolution)))
    ledger.resolve(
        run_id, step_id, resolution, by=form.person(), result=_result_of(form, resolution),
        note=form.optional("note"), force=form.flag("force"), attempt=attempt,
    )  # fmt: skip
    return "resolved", run_id


def _result_of(form: Form, resolution: Resolution) -> Any:
    """The result field, or the "no result" box, as ``Ledger.resolve(result=...)`` takes
    them: one of the two with 'done', neither with the others. With "plain text" ticked the
    field is the result itself, a string, as ``oncelog resolve --text`` takes it (an SMTP
    server's reply is not JSON, and a tired operator should not have to quote it)."""
    given, none = form.text("result") != "", form.flag("no_result")
    as_text = form.flag("as_text")
    if resolution is not Resolution.DONE:
        if given or none or as_text:
            raise FormError("a result goes with 'done' only: clear the result field")
        return None
    if given == none:
        raise FormError(
            "'done' needs the provider's result (JSON, or text with “plain text” ticked), or "
            "tick “no result” if it cannot be known"
            if not given
            else "give a result or tick “no result”, not both"
        )
    if none:
        if as_text:
            raise FormError("“plain text” goes with a result, not with “no result”")
        return NO_RESULT
    return form.text("result") if as_text else form.json("result")


def _switch(form: Form) -> dict[str, str | None]:
    """The ``run=`` / ``agent=`` arguments naming one kill switch."""
    scope = HaltScope(form.choice("scope", tuple(s.value for s in HaltScope)))
    target = form.exact("target", required=scope is not HaltScope.GLOBAL)
    if scope is HaltScope.GLOBAL:
        if target:
            raise FormError("a global switch covers every run: leave the agent or run id empty")
        return {}
    return {"run": target} if scope is HaltScope.RUN else {"agent": target}


def set_halt(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    switch = _switch(form)
    ledger.halt(
        form.text("reason", required=True), by=form.person(), ahead=form.flag("ahead"), **switch
    )
    return "halted", switch.get("run")


def clear_halt(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    switch = _switch(form)
    ledger.clear_halt(
        by=form.person(), note=form.optional("note"), run=switch.get("run"),
        agent=switch.get("agent"),
    )  # fmt: skip
    return "cleared", switch.get("run")


def retry_effect(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    """A fresh set of attempts, with the same key, for the step the page showed."""
    run_id, step_id = form.exact("run_id", required=True), form.exact("step_id", required=True)
    why = form.text("why", required=True)
    ledger.retry(run_id, step_id, by=form.person(), why=why, force=form.flag("force"))
    return "retried", run_id


def _limits(form: Form, names: list[str]) -> dict[str, Any]:
    """The limits filled in, whole numbers as ints (steps, tokens and calls are counts)."""
    limits = {name: form.number(name) for name in names}
    return {k: int(v) if v is not None and v.is_integer() else v for k, v in limits.items()}


def set_run_budget(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    run = ledger.get_run(form.exact("run_id", required=True))
    # Limits only: the policy (stop, pause, escalate) the budget was given stays.
    current = run.budget or Budget()
    limits = _limits(form, list(current.limits()))
    ledger.set_budget(run.run_id, dataclasses.replace(current, **limits), by=form.person())
    return "budget", run.run_id


def set_agent_budget(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    agent = form.exact("agent", required=True)
    found = [setting.budget for setting in ledger.agent_budgets() if setting.agent == agent]
    current = found[0] if found else AgentBudget()
    limits = _limits(form, list(current.limits()))
    ledger.set_agent_budget(agent, dataclasses.replace(current, **limits), by=form.person())
    return "budget", None


def release_hold(form: Form, ledger: Ledger) -> tuple[str, str | None]:
    """Free the hold the page showed: its name comes with the form as stored (a JSON
    array), so the person releases exactly that resource."""
    resource = form.exact("resource", required=True)
    try:
        name = json.loads(resource)
    except (ValueError, RecursionError):
        name = None
    if not isinstance(name, list):
        raise FormError(f"resource: {resource!r} is not a hold's name as the page shows it")
    why = form.text("why", required=True)
    released = ledger.release_hold(name, by=form.person(), why=why, force=form.flag("force"))
    return "released", released.holder


ACTIONS: dict[str, tuple[str, Change]] = {
    # path: (the page it is on, the change)
    "/approvals/decide": ("approvals", decide_approval),
    "/unknown/resolve": ("unknown", resolve_effect),
    "/halts/set": ("halts", set_halt),
    "/halts/clear": ("halts", clear_halt),
    "/budgets/run": ("budgets", set_run_budget),
    "/budgets/agent": ("budgets", set_agent_budget),
    "/holds/release": ("holds", release_hold),
    "/steps/retry": ("overview", retry_effect),
}


def routes() -> list[Route]:
    return [
        Route(path, _action(page, change), methods=["POST"])
        for path, (page, change) in ACTIONS.items()
    ]


def _action(page: str, change: Change) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        console = console_of(request)
        form = await submitted(request, console.access)
        try:
            done, run_id = await run_in_threadpool(change, form, console.ledger)
        except OnceLogError as exc:
            typed = {k: v for k, v in form.data.items() if k != "csrf" and isinstance(v, str)}
            return await show(
                request, page, error=describe(exc), status=status_for(exc), typed=typed
            )
        # Post/redirect/get: reloading the page shows it again, never repeats the change.
        query = {"done": done} if run_id is None else {"done": done, "run": run_id}
        return RedirectResponse(f"{PAGES[page][0]}?{urlencode(query)}", status_code=303)

    return endpoint
