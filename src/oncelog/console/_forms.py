"""Reading a submitted form: the CSRF token first, then each field into the type the
library call takes. A bad field is a ``FormError`` the person sees next to the form."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request

from oncelog import UsageError

from ._access import Access

MAX_FIELD_CHARS = 1 << 20  # a result JSON may be as large as a recorded payload
MAX_NAME_CHARS = 200


class FormError(UsageError):
    """A field the person filled in wrong (or left out)."""


class Form:
    """A submitted form whose CSRF token was right."""

    def __init__(self, data: FormData) -> None:
        self.data = data

    def text(self, name: str, *, required: bool = False, limit: int = MAX_FIELD_CHARS) -> str:
        value = self.data.get(name)
        text = value.strip() if isinstance(value, str) else ""
        if required and not text:
            raise FormError(f"{name.replace('_', ' ')} is required")
        if len(text) > limit:
            raise FormError(f"{name.replace('_', ' ')} is longer than {limit} characters")
        return text

    def exact(self, name: str, *, required: bool = False) -> str:
        """An id, exactly as sent: ids are matched as stored, so ``"victim "`` is never
        taken for ``victim`` (trimming is for what people type, like names and notes)."""
        value = self.data.get(name)
        text = value if isinstance(value, str) else ""
        if required and not text:
            raise FormError(f"{name.replace('_', ' ')} is required")
        if len(text) > MAX_FIELD_CHARS:
            raise FormError(f"{name.replace('_', ' ')} is longer than {MAX_FIELD_CHARS} characters")
        return text

    def request_id(self, name: str) -> int:
        """The id of a stored row, sent by the page that showed it."""
        text = self.exact(name, required=True)
        if not text.isascii() or not text.isdigit():
            raise FormError(f"{name.replace('_', ' ')}: {text!r} is not a request id")
        return int(text)

    def counted(self, name: str) -> int:
        """A count from 1 (an attempt), sent by the page that showed it."""
        text = self.exact(name, required=True)
        if not text.isascii() or not text.isdigit() or int(text) < 1:
            raise FormError(f"{name.replace('_', ' ')}: {text!r} is not a number from 1")
        return int(text)

    def person(self) -> str:
        """Who acts: required on every change, and recorded by the ledger with it."""
        return self.text("by", required=True, limit=MAX_NAME_CHARS)

    def optional(self, name: str) -> str | None:
        return self.text(name) or None

    def number(self, name: str) -> float | None:
        """A non-negative number, or None when left empty (no limit, no expiry)."""
        text = self.text(name)
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise FormError(f"{name.replace('_', ' ')}: {text!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise FormError(f"{name.replace('_', ' ')} must be a number >= 0, not {text!r}")
        return value

    def json(self, name: str) -> Any:
        text = self.text(name)
        if not text:
            return None
        try:
            return json.loads(text)
        except RecursionError:
            # Python's decoder recurses per level: deep text is a RecursionError.
            raise FormError(f"{name.replace('_', ' ')} is nested too deeply") from None
        except ValueError as exc:
            raise FormError(f"{name.replace('_', ' ')} is not JSON: {exc}") from None

    def flag(self, name: str) -> bool:
        """A ticked checkbox (its value is "yes")."""
        return self.text(name) == "yes"

    def choice(self, name: str, options: tuple[str, ...]) -> str:
        value = self.text(name, required=True)
        if value not in options:
            raise FormError(f"{name.replace('_', ' ')} must be one of {', '.join(options)}")
        return value


async def submitted(request: Request, access: Access) -> Form:
    """The request's form, once its CSRF token matches the session's (constant time)."""
    data = await request.form(max_files=0, max_fields=50)
    given = data.get("csrf")
    session: str = request.state.session
    if not isinstance(given, str) or not access.csrf_ok(session, given):
        raise HTTPException(403, "Missing or wrong CSRF token: reload the page and try again.")
    return Form(data)
