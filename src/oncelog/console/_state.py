"""What every request handler reaches through the application: the ledger, the access
rules and the templates."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.templating import Jinja2Templates

from oncelog import Ledger

from ._access import Access


@dataclass(frozen=True)
class Console:
    ledger: Ledger
    access: Access
    templates: Jinja2Templates


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console
