"""The console's application: routes, templates and the guard, over one ``Ledger``."""

from __future__ import annotations

import time
from importlib import resources
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from oncelog import Ledger
from oncelog.display import visible

from . import _actions as actions
from . import _links as links
from . import _pages as pages
from ._access import SESSION_SECONDS, Access
from ._forms import submitted
from ._guard import LOGIN_PATH, NOT_LOGGED_IN, Guard
from ._redact import SHOWN_CHARS, approved, shown, shown_entry
from ._state import Console, console_of


def create_app(ledger: Ledger, access: Access) -> Starlette:
    """The console over ``ledger``; ``access`` says who may use it and from where."""
    css = resources.files(__package__).joinpath("static/console.css").read_text()

    async def stylesheet(request: Request) -> Response:
        return Response(css, media_type="text/css")

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)  # browsers ask; a 404 would be noise in their logs

    routes = [
        Route(LOGIN_PATH, login),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/console.css", stylesheet),
        Route("/favicon.ico", no_icon),
        *pages.routes(),
        *actions.routes(),
        *links.routes(),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(Guard, access=access)])
    app.state.console = Console(ledger, access, Jinja2Templates(env=_environment()))
    return app


def _environment() -> jinja2.Environment:
    # Autoescape everywhere: every string an agent wrote is shown as text, never markup.
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        shown=shown, shown_entry=shown_entry, when=_when, seconds=_milliseconds, number=_number,
        approved=approved, visible=visible, run_path=run_path,
    )  # fmt: skip
    env.globals["shown_chars"] = SHOWN_CHARS
    return env


def run_path(run_id: str) -> str:
    """The path of a run's page. Every character but letters, digits and ``_.-~`` is
    percent-encoded, ``/`` included: a run id ``other/../victim`` stays one segment, which
    a browser does not resolve into the page of the run ``victim``."""
    return "/runs/" + quote(run_id, safe="")


def _when(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _number(value: float | None) -> str:
    return "no limit" if value is None else f"{round(value, 2):g}"


async def login(request: Request) -> Response:
    """The URL printed at start: the right token gets a session cookie."""
    access = console_of(request).access
    if not access.token_ok(request.query_params.get("token", "")):
        return PlainTextResponse(NOT_LOGGED_IN, status_code=401)
    response = RedirectResponse("/", status_code=303)  # and the token leaves the address bar
    response.set_cookie(
        access.cookie_name,
        access.new_session(),
        max_age=SESSION_SECONDS,
        path="/",
        httponly=True,
        samesite="strict",
    )
    return response


async def logout(request: Request) -> Response:
    console = console_of(request)
    await submitted(request, console.access)
    response = PlainTextResponse("Logged out.")
    response.delete_cookie(console.access.cookie_name, path="/", httponly=True, samesite="strict")
    return response
