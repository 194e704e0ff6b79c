"""The checks every request passes before a page or an action sees it, and the headers
every response carries."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._access import Access

LOGIN_PATH = "/login"
PUBLIC = ("/static/console.css", "/favicon.ico")
LINK_PREFIX = "/link/"  # a notice's signed link: the link itself is the credential

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": under it Chromium sends "Origin: null" with a same-origin form,
    # and the Origin check below could not tell the console's own forms from a forged
    # one. "same-origin" sends nothing to any other origin, which is what matters.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

NOT_LOGGED_IN = (
    "Not logged in. Open the login URL that 'oncelog console' printed when it started "
    "(http://HOST:PORT/login?token=...); the token is kept in its token file."
)


class Guard:
    """Host header (DNS rebinding), then session cookie, then, for a POST, its origin.
    The CSRF token in a form's body is checked by the action that reads the form."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        request = Request(scope)
        refused = self.refusal(request)
        if refused is not None:
            await refused(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def refusal(self, request: Request) -> Response | None:
        if request.headers.get("host", "") not in self.access.hosts:
            return PlainTextResponse("Unexpected Host header.", status_code=400)
        if request.url.path == LOGIN_PATH and request.method == "GET":
            return None
        if request.url.path in PUBLIC and request.method == "GET":
            return None  # nothing of the ledger: a link's page, shown without a login, uses them
        if request.url.path.startswith(LINK_PREFIX):
            # No session: the signed link grants its one decision. Its confirming POST
            # still comes from the console's own page (and carries the link's CSRF token).
            if request.method not in ("GET", "HEAD") and not self.same_origin(request):
                return PlainTextResponse("Cross-origin request refused.", status_code=403)
            return None
        session = self.access.session(request.cookies.get(self.access.cookie_name))
        if session is None:
            return PlainTextResponse(NOT_LOGGED_IN, status_code=401)
        request.state.session = session
        if request.method not in ("GET", "HEAD") and not self.same_origin(request):
            return PlainTextResponse("Cross-origin request refused.", status_code=403)
        return None

    def same_origin(self, request: Request) -> bool:
        """The Origin header, or when a client sends none, the Referer's origin, must be
        the console's own; a browser's fetch metadata, when sent, must agree."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            return False
        origin = request.headers.get("origin")
        if origin is None:
            referer = urlsplit(request.headers.get("referer", ""))
            origin = f"{referer.scheme}://{referer.netloc}" if referer.netloc else None
        return origin in self.access.origins
