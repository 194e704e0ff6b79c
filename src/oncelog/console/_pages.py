"""The pages: each one a query of the read model rendered by its template. A GET changes
nothing; the forms on a page post to the actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from oncelog import (
    ConflictError,
    Ledger,
    OnceLogError,
    ResourceHeld,
    RunLeased,
    RunStatus,
    StoreUnavailable,
    UnknownApproval,
    UnknownHalt,
    UnknownName,
    UnknownRun,
    UsageError,
)

from . import _queries as queries
from ._forms import FormError
from ._state import console_of

Query = Callable[[Ledger, Request], dict[str, Any]]

# What a person sees after a change went through (the change itself shows on the page),
# followed, when it concerns one run, by what happens next for that run.
NOTICES = {
    "approved": "Approved, for exactly these arguments, once.",
    "edited": "Approved with the edited arguments: the step runs the edited call, once, "
    "under a new key; the request as asked is marked edited.",
    "denied": "Denied: the agent gets ApprovalDenied at that step.",
    "resolved": "Decision recorded in the run's journal.",
    "retried": "A fresh set of attempts, with the same key, recorded in the run's journal.",
    "halted": "Kill switch on: no new step of a covered run starts.",
    "cleared": "Kill switch off: restart the halted agents; they resume.",
    "budget": "Budget saved.",
    "released": "Hold released: the next run that asks for it takes it, with a greater token.",
}


def notice(ledger: Ledger, request: Request) -> str | None:
    """The banner after a change: what was done, to which run, and what happens next."""
    done = NOTICES.get(request.query_params.get("done", ""))
    run_id = request.query_params.get("run")
    if done is None or not run_id:
        return done
    try:
        after = ledger.what_next(run_id)
    except UnknownRun:
        return f"Run {run_id}: {done}"
    return f"Run {run_id}: {done} Next: {'; '.join(after)}."


def _status(request: Request) -> RunStatus | None:
    value = request.query_params.get("status") or None
    if value is not None and value not in {s.value for s in RunStatus}:
        raise FormError(f"there is no run status {value!r}")
    return None if value is None else RunStatus(value)


PAGES: dict[str, tuple[str, str, Query]] = {
    # name: (path, template, query)
    "overview": ("/", "overview.html", lambda ledger, _: queries.overview(ledger)),
    "runs": (
        "/runs",
        "runs.html",
        lambda ledger, r: queries.runs(
            ledger, _status(r), r.query_params.get("agent", ""), r.query_params.get("q", "")
        ),
    ),
    "run": (
        "/runs/{run_id:path}",
        "run.html",
        lambda ledger, r: queries.timeline(ledger, r.path_params["run_id"]),
    ),
    "approvals": ("/approvals", "approvals.html", lambda ledger, _: queries.approvals(ledger)),
    "unknown": ("/unknown", "unknown.html", lambda ledger, _: queries.doubts(ledger)),
    "halts": ("/halts", "halts.html", lambda ledger, _: queries.halts(ledger)),
    "budgets": ("/budgets", "budgets.html", lambda ledger, _: queries.budgets(ledger)),
    "holds": ("/holds", "holds.html", lambda ledger, _: queries.subjects_and_holds(ledger)),
}


def routes() -> list[Route]:
    return [Route(path, _page(name), name=name) for name, (path, _, _) in PAGES.items()]


def _page(name: str) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        return await show(request, name)

    return endpoint


async def show(
    request: Request,
    name: str,
    *,
    error: str | None = None,
    status: int = 200,
    typed: dict[str, str] | None = None,
) -> Response:
    """Render page ``name``, with an error above it when an action on it failed, and the
    fields of the form that failed (``typed``) for a page that fills them in again."""
    console = console_of(request)
    _, template, query = PAGES[name]
    try:
        context = await run_in_threadpool(query, console.ledger, request)
        banner = None if error else await run_in_threadpool(notice, console.ledger, request)
    except OnceLogError as exc:
        return problem(request, exc)
    context.update(
        page=name,
        error=error,
        notice=banner,
        csrf=console.access.csrf_token(request.state.session),
        typed=typed or {},
    )
    return console.templates.TemplateResponse(request, template, context, status_code=status)


def problem(request: Request, exc: OnceLogError) -> Response:
    """An error page: what went wrong, in the library's words."""
    console = console_of(request)
    context = {"page": None, "error": describe(exc), "notice": None, "csrf": ""}
    return console.templates.TemplateResponse(
        request, "problem.html", context, status_code=status_for(exc)
    )


# The library's words name the CLI's flags; on a page, the person ticks a box instead.
_ON_A_PAGE = (
    ("force the decision (--force, force=True)",
     "tick “Decide even if the process holding this run is still alive” in the form below "
     "and record the decision again"),
    ("release it with --force",
     "tick “Release even if its holder's lease still runs” and release it again"),
    ("then decide on it (--attempt ", "then decide on it on this page (attempt "),
)  # fmt: skip


def describe(exc: OnceLogError) -> str:
    """``exc`` as a page shows it: in the words of the page's own controls."""
    if isinstance(exc, FormError):
        return exc.message
    said = f"{type(exc).__name__}: {exc}"
    for flag, box in _ON_A_PAGE:
        said = said.replace(flag, box)
    return said


def status_for(exc: OnceLogError) -> int:
    if isinstance(exc, (ConflictError, UnknownApproval, UnknownHalt)):
        return 409  # decided, cleared or resolved by someone else meanwhile
    if isinstance(exc, UnknownName):
        return 404
    if isinstance(exc, (RunLeased, ResourceHeld)):
        return 409  # a live process still holds the run, or the resource
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, StoreUnavailable):
        return 503
    return 500
