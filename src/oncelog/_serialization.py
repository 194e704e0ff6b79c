"""Canonical JSON: the one encoding for arguments, results and hashes.

Live calls hand the agent ``decode(encode(value))``, the very value replay will hand it,
so a resumed run cannot branch on a difference between a tuple and a list.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, NoReturn

from ._exceptions import PayloadTooLarge, UnserializableValue

_SCALARS = (str, int, bool, type(None))


def _not_json(value: Any) -> NoReturn:
    raise TypeError(f"{type(value).__name__} is not JSON")


# One encoder, built once: json.dumps with options builds a new one on every call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_not_json
)
_scan_once = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__


def decode(text: str) -> Any:
    """``json.loads`` without its Python layers: canonical text has no surrounding
    whitespace, and replay decodes once per step."""
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        end = -1
    return value if end == len(text) else json.loads(text)


def _lossless(value: Any) -> bool:
    """True if JSON holds ``value`` exactly (no int keys turned into strings, no NaN)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _SCALARS):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return False
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            return False
    return True


def _explain(value: Any, path: str) -> None:
    """Raise for the first part of ``value`` that JSON cannot hold exactly, naming it."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UnserializableValue(f"{path} is {value!r}, which JSON cannot hold")
    if isinstance(value, (*_SCALARS, float)):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnserializableValue(f"{path} has a non-string key {k!r}")
            _explain(v, f"{path}.{k}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _explain(v, f"{path}[{i}]")
        return
    raise UnserializableValue(
        f"{path} is a {type(value).__name__}; oncelog records JSON values "
        "(dict, list, str, int, float, bool, None)"
    )


def encode(value: Any, *, what: str, limit: int, exact: bool = True) -> str:
    """Encode ``value`` canonically. With ``exact``, refuse what JSON would change (int
    keys, NaN) instead of recording it lossily; anything JSON cannot hold is refused."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        _explain(value, what)
        raise UnserializableValue(f"{what} cannot be encoded: {exc}") from exc
    # Decoding and comparing run in C; only a mismatch (a tuple, or a real loss such as
    # an int key) pays for the walk in Python.
    if exact and decode(text) != value and not _lossless(value):
        _explain(value, what)
    if len(text) > limit // 4:  # at most 4 bytes a character: skip the count when it fits
        size = len(text.encode())
        if size > limit:
            raise PayloadTooLarge(f"{what} is {size} bytes, over the limit of {limit}")
    return text


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
