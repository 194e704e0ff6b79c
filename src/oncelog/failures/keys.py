"""A provider's documented answers to a repeated idempotency key, as failures.

A provider that deduplicates on a key answers two requests specially, each with its own
status and error code (``oncelog.providers`` lists them, with their sources):

- a request with the key while an earlier one with it still runs (Stripe's
  ``409 idempotency_key_in_use``, Nylas's ``409 api.concurrent_idempotent_request``):
  this request was not performed, the earlier one may still be: in progress, the run
  stops and a later start sends it again with the same key;
- a request with the key and other parameters than the first one's (Stripe's
  ``400 idempotency_error``, Resend's ``409 invalid_idempotent_request``): sending it
  again gets the same answer, and sending it with a new key could act twice: key
  mismatch, a person decides.

``answers(in_progress=..., mismatch=...)`` classifies exactly those: an exception that
carries an HTTP answer (``httpx.HTTPStatusError``, ``requests.HTTPError``, or a client's
own error with ``status_code``/``http_status`` and ``code`` attributes) whose status is
the documented one and whose error code is the documented one, found as the value of a
``code``, ``type``, ``name`` or ``error`` field of the JSON body (at any of its first
three levels) or of the exception. Anything else is left to the next classifier (None):
combine it with one for the client, ``first(answers(...), httpx.classify)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .._exceptions import ConfigurationError
from . import Classifier, Failure

_CODE_FIELDS = ("code", "type", "name", "error")
_DEPTH = 3


@dataclass(frozen=True)
class KeyAnswer:
    """One documented answer: its HTTP status and its error code."""

    status: int
    code: str

    def __post_init__(self) -> None:
        if not (isinstance(self.status, int) and 400 <= self.status <= 599) or not self.code:
            raise ConfigurationError(
                f"an error answer is a 4xx or 5xx status and a code, not {self}"
            )

    def __str__(self) -> str:
        return f"{self.status} {self.code}"


def answers(*, in_progress: KeyAnswer | None, mismatch: KeyAnswer | None) -> Classifier:
    """A classifier for a provider's two answers to a repeated key (either may be None:
    not documented)."""

    def classify(exc: BaseException) -> Failure | None:
        status, codes = answer_of(exc)
        if status is None:
            return None
        if _is(in_progress, status, codes):
            return Failure.IN_PROGRESS
        if _is(mismatch, status, codes):
            return Failure.KEY_MISMATCH
        return None

    return classify


def _is(answer: KeyAnswer | None, status: int, codes: frozenset[str]) -> bool:
    return answer is not None and answer.status == status and answer.code in codes


def answer_of(exc: BaseException) -> tuple[int | None, frozenset[str]]:
    """The HTTP status an exception carries and the error codes of its answer."""
    response = getattr(exc, "response", None)
    status = _status(response) if response is not None else _status(exc)
    codes = set(_own_codes(exc))
    if response is not None:
        codes.update(_body_codes(response))
    return status, frozenset(codes)


def _status(holder: object) -> int | None:
    for field in ("status_code", "http_status", "status"):
        value = getattr(holder, field, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _own_codes(exc: BaseException) -> list[str]:
    return [v for v in (getattr(exc, f, None) for f in (*_CODE_FIELDS, "error_type"))
            if isinstance(v, str)]  # fmt: skip


def _body_codes(response: Any) -> list[str]:
    """The codes in a response's JSON body; none if it was not read or is not JSON (a
    streamed body is never read here: classifying must not consume what the caller
    may still read)."""
    if getattr(response, "_content", None) is False:
        return []  # a requests.Response whose body is still on the wire (stream=True)
    try:
        content = response.content
        body = json.loads(content) if isinstance(content, (bytes, str)) and content else None
    except Exception:  # not read (httpx.ResponseNotRead), not JSON, not text
        return []
    return list(_codes_in(body, _DEPTH))


def _codes_in(value: Any, depth: int) -> list[str]:
    if depth == 0 or not isinstance(value, dict):
        return []
    found: list[str] = []
    for field, inner in value.items():
        if field in _CODE_FIELDS and isinstance(inner, str):
            found.append(inner)
        found += _codes_in(inner, depth - 1)
    return found


__all__ = ["KeyAnswer", "answer_of", "answers"]
