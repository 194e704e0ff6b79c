"""Canonical JSON: the one encoding for arguments, results and hashes.

Live calls hand the agent ``decode(encode(value))``, the very value replay will hand it,
so a resumed run cannot branch on a difference between a tuple and a list.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ._exceptions import PayloadTooLarge, UnserializableValue

_JSON_SCALARS = (str, int, float, bool, type(None))


def _check(value: Any, path: str) -> None:
    # json.dumps would silently turn int keys into strings and accept NaN; replay must
    # see exactly what the live call saw, so anything lossy is refused up front.
    if isinstance(value, float) and not math.isfinite(value):
        raise UnserializableValue(f"{path} is {value!r}, which JSON cannot hold")
    if isinstance(value, _JSON_SCALARS):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnserializableValue(f"{path} has a non-string key {k!r}")
            _check(v, f"{path}.{k}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]")
        return
    raise UnserializableValue(
        f"{path} is a {type(value).__name__}; oncelog records JSON values "
        "(dict, list, str, int, float, bool, None)"
    )


def encode(value: Any, *, what: str, limit: int) -> str:
    """Encode ``value`` canonically; raise a typed error instead of recording it lossily."""
    _check(value, what)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode())
    if size > limit:
        raise PayloadTooLarge(f"{what} is {size} bytes, over the limit of {limit}")
    return text


def decode(text: str) -> Any:
    return json.loads(text)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
