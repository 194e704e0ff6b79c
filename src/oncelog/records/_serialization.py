"""Canonical JSON: the one encoding for arguments, results and hashes.

Live calls hand the agent ``decode(encode(value))``, the very value replay will hand it,
so a resumed run cannot branch on a difference between a tuple and a list.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, NoReturn

from .._exceptions import PayloadTooLarge, UnserializableValue
from ._no_result import NO_RESULT

_SCALARS = (str, int, bool, type(None))
# Deeper values are refused. A fixed bound, far under Python's recursion limit, so a value
# recorded in a shallow call stack also decodes on replay in a deep one (and the C
# encoder never meets the limit half-way through).
MAX_DEPTH = 200
_CONTAINERS = (dict, list, tuple)


def _not_json(value: Any) -> NoReturn:
    raise TypeError(f"{type(value).__name__} is not JSON")


# What json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
# allow_nan=False, default=_not_json) runs, called without its Python layers (``JSONEncoder
# .encode`` and ``iterencode`` cost more than encoding a step's arguments). Made once, with
# no table of the containers being encoded (``markers``): it holds no state, so threads
# share it, and a circular value ends in the RecursionError that the check would have
# turned into a ValueError, refused as too deep either way (``_explain`` recursed on it).
_ENCODER = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _not_json, json.encoder.encode_basestring, None, ":", ",", True, False, False
)


_scan_once = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__


def decode(text: str) -> Any:
    """``json.loads`` without its Python layers: canonical text has no surrounding
    whitespace, and replay decodes once per step."""
    try:
        try:
            value, end = _scan_once(text, 0)
        except StopIteration:
            end = -1
        return value if end == len(text) else json.loads(text)
    except RecursionError:
        # Only a person's text can be this deep (``encode`` refuses past MAX_DEPTH): a
        # ValueError like any other text that is not a value oncelog can hold.
        raise ValueError(f"it is nested more than {MAX_DEPTH} levels deep") from None


_EXACT_SCALARS = frozenset((str, int, bool, type(None)))


def _exact(value: Any) -> bool:
    """True if ``value`` is made of exact JSON types only (``dict`` with ``str`` keys,
    ``list``, ``str``, ``int``, ``bool``, ``None``, finite ``float``; no subclass, no
    tuple): JSON gives it back equal, so the decoding round trip has nothing to check.
    Looked at by type, a container at a time, cheaper than decoding the text again."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            if not all(type(key) is str for key in item):
                return False
            children = item.values()
        elif kind is list:
            children = item
        elif kind in _EXACT_SCALARS:
            continue
        else:
            return kind is float and -1.8e308 < item < 1.8e308 and not stack
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append(child)
            elif kind not in _EXACT_SCALARS and not (kind is float and -1.8e308 < child < 1.8e308):
                return False
    return True


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
    if value is NO_RESULT:
        raise UnserializableValue(
            f"{path} is oncelog.NO_RESULT: a person resolved that step done without the "
            "provider's answer, so there is nothing to pass on; handle it first"
        )
    raise UnserializableValue(
        f"{path} is a {type(value).__name__}; oncelog records JSON values "
        "(dict, list, str, int, float, bool, None)"
    )


def _too_deep(value: Any) -> bool:
    """True if ``value`` nests deeper than ``MAX_DEPTH``, measured a level at a time, each
    container looked at once: for a value whose text has that many brackets."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below.extend([child for child in children if isinstance(child, _CONTAINERS)])
        level = below
    return False


def _nested_too_deeply(what: str) -> UnserializableValue:
    return UnserializableValue(f"{what} is nested more than {MAX_DEPTH} levels deep")


def _check_utf8(text: str, what: str) -> int:
    """The size of ``text`` in UTF-8; a lone surrogate (which no store can hold) refused."""
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:
        raise UnserializableValue(
            f"{what} holds a lone surrogate {text[exc.start]!r}, which UTF-8 cannot store "
            "(bytes decoded with errors='surrogateescape'?)"
        ) from None


def encode(value: Any, *, what: str, limit: int, exact: bool = True) -> str:
    """Encode ``value`` canonically. With ``exact``, refuse what JSON would change (int
    keys, NaN) instead of recording it lossily; anything JSON cannot hold is refused, and
    so is a value nested deeper than ``MAX_DEPTH`` or holding a lone surrogate. A value
    of exact JSON types only (``_exact``) is not decoded again to be checked."""
    text = _encoded(value, what)
    if exact and not _exact(value) and _scan_once(text, 0)[0] != value and not _lossless(value):
        _explain(value, what)
    return _within(text, what, limit)


def canonical_json(value: Any, *, what: str = "value") -> str:
    """``value`` as the canonical JSON text oncelog records it by (keys sorted, no spaces),
    for a hash that key order and spacing do not change; ``UnserializableValue`` for what
    JSON cannot hold or would change, named ``what`` in the message."""
    return encode(value, what=what, limit=1 << 30)


def encode_decoded(value: Any, *, what: str, limit: int, exact: bool = True) -> tuple[str, Any]:
    """``encode``, and (``exact``) ``decode`` of the text: a result is recorded and handed
    back as replay will hand it back (a value of its own, whatever the caller does with
    the one it gave), and the exactness check has decoded it already."""
    text = _encoded(value, what)
    # Decoding and comparing run in C; only a mismatch (a tuple, or a real loss such as
    # an int key) pays for the walk in Python.
    # The encoder's text is one JSON value with nothing around it: ``decode`` without
    # its call.
    decoded = _scan_once(text, 0)[0] if exact else None
    if exact and decoded != value and not _lossless(value):
        _explain(value, what)
    return _within(text, what, limit), decoded


def _encoded(value: Any, what: str) -> str:
    """The canonical text of ``value``, refused if JSON cannot hold it or it nests too
    deep."""
    try:
        text = "".join(_ENCODER(value, 0))
    except RecursionError:
        raise _nested_too_deeply(what) from None
    except (TypeError, ValueError) as exc:
        try:
            _explain(value, what)
        except RecursionError:
            raise _nested_too_deeply(what) from None
        raise UnserializableValue(f"{what} cannot be encoded: {exc}") from exc
    # Counting the brackets of the text runs in C and settles almost every value; a text
    # no longer than the bound cannot hold more brackets than that.
    if len(text) > MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(value):
        raise _nested_too_deeply(what)
    return text


def _within(text: str, what: str, limit: int) -> str:
    """``text``, refused if it holds a lone surrogate or is over ``limit`` bytes."""
    if not text.isascii():
        size = _check_utf8(text, what)
        if size > limit:
            raise PayloadTooLarge(f"{what} is {size} bytes, over the limit of {limit}")
    elif len(text) > limit:
        raise PayloadTooLarge(f"{what} is {len(text)} bytes, over the limit of {limit}")
    return text


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
