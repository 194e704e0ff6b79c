"""A person at the console, through Starlette's TestClient: logged in, posting forms as
the console's own pages do (its origin, the CSRF token scraped from the page)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2 as httpx
from starlette.testclient import TestClient

import oncelog
from oncelog.console import Access, create_app

TOKEN = "test-token-" + "x" * 40
PORT = 8470
BASE = f"http://127.0.0.1:{PORT}"
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


class Person:
    def __init__(self, client: TestClient) -> None:
        self.client = client

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, follow_redirects=False, **kwargs)

    def csrf(self, page: str = "/") -> str:
        found = CSRF_FIELD.search(self.get(page).text)
        assert found is not None, f"no CSRF field on {page}"
        return found.group(1)

    def post(
        self, path: str, data: dict[str, str], *, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """Submit a form as the console's page does: with its origin and CSRF token."""
        sent = {"csrf": self.csrf(), **data}
        return self.client.post(
            path,
            data=sent,
            headers={"Origin": BASE} if headers is None else headers,
            follow_redirects=False,
        )


@contextmanager
def console_client(ledger: oncelog.Ledger, *, login: bool = True) -> Iterator[Person]:
    app = create_app(ledger, Access.for_address(TOKEN, "127.0.0.1", PORT))
    with TestClient(app, base_url=BASE) as client:
        if login:
            assert client.get(f"/login?token={TOKEN}", follow_redirects=False).status_code == 303
        yield Person(client)


def store_state(ledger: oncelog.Ledger) -> tuple[Any, ...]:
    """Everything a console action could change, to show that something did not."""
    return (
        ledger.approvals(None),
        ledger.halts(active_only=False),
        ledger.in_doubt(),
        ledger.runs(),
        ledger.journal(limit=1_000_000),
    )
