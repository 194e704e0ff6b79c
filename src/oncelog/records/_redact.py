"""Secret fields: recorded only as a keyed hash, never as themselves.

A tool declares the names of its secret fields (``secret=("card_number", "cvc")``):
arguments of those names, and keys of those names at any depth of its arguments and its
result. Before anything is written, each such value becomes ``redacted:<hmac>``, an
HMAC-SHA256 under the ledger's redaction key of the value's canonical JSON. The same
value under the same key gives the same hash, so a restarted agent passing the same card
replays, and another card is argument drift; without the key, a low-entropy secret (a
card number) cannot be guessed from the hash by trying them all.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
from collections.abc import Callable
from typing import Any

PREFIX = "redacted:"


def secret_positions(fn: Callable[..., Any], names: frozenset[str]) -> tuple[int, ...]:
    """Where the secret parameters sit among the positional arguments."""
    params = [
        p for p in inspect.signature(fn).parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]  # fmt: skip
    return tuple(i for i, p in enumerate(params) if p.name in names)


def _mask(value: Any, key: bytes) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return PREFIX + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:32]


def redact(value: Any, names: frozenset[str], key: bytes) -> Any:
    """``value`` with every entry under a secret key replaced by its keyed hash."""
    if isinstance(value, dict):
        return {k: _mask(v, key) if k in names else redact(v, names, key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(item, names, key) for item in value)
    return value


def redact_call(
    payload: dict[str, Any], positions: tuple[int, ...], names: frozenset[str], key: bytes
) -> dict[str, Any]:
    """A call's ``{"args", "kwargs"}`` as it may be recorded."""
    args = [
        _mask(arg, key) if i in positions else redact(arg, names, key)
        for i, arg in enumerate(payload["args"])
    ]
    return {"args": args, "kwargs": redact(payload["kwargs"], names, key)}
