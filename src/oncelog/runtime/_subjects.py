"""An effect's subject: what it acts on, named by its tool's ``once_per`` from the call's
arguments, as the one text every run and store compares, and the idempotency key that
derives from it."""

from __future__ import annotations

import json
import math
from hashlib import sha256
from itertools import islice, product
from typing import Any

from .._exceptions import ConfigurationError, InvalidPayload
from ..records._serialization import decode, encode
from ._calls import KEY_PREFIX
from ._names import MAX_NAME_CHARS, check_text
from ._tools import ToolSpec

_SCALARS = (str, int, float, bool, type(None))
# Every integer below this magnitude is a float exactly, and no other float stands for it;
# from here on a float is the rounding of several integers (2**53 + 1 parses as 2**53), so
# which one was meant cannot be told.
_EXACT_FLOATS = 2**53
# The older spellings of one subject looked up at most (``older_spellings``): every mix of
# six whole numbers written as ints or as floats; a subject with more is looked up under
# the first 64 mixes only.
MAX_SPELLINGS = 64


def subject_text(spec: ToolSpec, payload: Any, run_id: str, step_id: str) -> str:
    """The canonical JSON list of the subject ``spec.once_per`` makes of the arguments
    (a string is a list of one); ``ConfigurationError`` for anything but a string or a
    tuple (or list) of JSON scalars, or for a ``once_per`` that raises.

    Equal numbers are one subject: a float with no fraction is written as the int it
    equals (``42.0`` and ``-0.0`` as ``42`` and ``0``), one at or beyond 2**53 is refused
    (it may stand for another integer). Types stay apart otherwise: ``True`` is not ``1``
    and ``"42"`` is not ``42``; a subclass of a scalar (an ``IntEnum``, a ``str`` subclass)
    or any other number type (``Decimal``, numpy's) is refused."""
    assert spec.once_per is not None
    try:
        value = spec.once_per(*payload["args"], **payload["kwargs"])
    except Exception as exc:
        raise ConfigurationError(
            f"the once_per function of {spec.name!r} failed: {exc}",
            run_id=run_id, step_id=step_id,
        ) from exc  # fmt: skip
    parts = [value] if isinstance(value, str) else value
    if not isinstance(parts, (tuple, list)) or not parts or not all(
        type(part) in _SCALARS and not (type(part) is float and not math.isfinite(part))
        for part in parts
    ):  # fmt: skip
        raise ConfigurationError(
            f"the once_per function of {spec.name!r} returned {value!r}: a subject is a "
            "string or a non-empty tuple of strings, numbers, booleans and None",
            run_id=run_id, step_id=step_id,
        )  # fmt: skip
    inexact = next((p for p in parts if type(p) is float and abs(p) >= _EXACT_FLOATS), None)
    if inexact is not None:
        raise ConfigurationError(
            f"the once_per function of {spec.name!r} returned {value!r}: the float "
            f"{inexact!r} is one of several integers rounded alike; give the int or a string",
            run_id=run_id, step_id=step_id,
        )  # fmt: skip
    try:
        text = encode(
            [_canonical(part) for part in parts], what="subject", limit=4 * MAX_NAME_CHARS
        )
    except InvalidPayload as exc:
        raise ConfigurationError(exc.message, run_id=run_id, step_id=step_id) from None
    if len(text) > MAX_NAME_CHARS or "\\u0000" in text:
        raise ConfigurationError(
            f"the subject {text[:100]} of {spec.name!r} is longer than {MAX_NAME_CHARS} "
            "characters or holds a NUL",
            run_id=run_id, step_id=step_id,
        )  # fmt: skip
    check_text(text, "a subject", run_id=run_id, step_id=step_id)
    return text


def _canonical(part: Any) -> Any:
    """A float with no fraction as the int it equals; anything else as it is."""
    return int(part) if type(part) is float and part.is_integer() else part


def older_spellings(subject: str) -> tuple[str, ...]:
    """The texts versions before canonical numbers wrote for ``subject`` where a once_per
    gave a float with no fraction (``["refund",42.0]`` for ``["refund",42]``; ``0`` also as
    ``-0.0``): every mix of its whole numbers as ints and as floats, at most
    ``MAX_SPELLINGS`` (six whole numbers) of them. Empty for a subject without one."""
    parts = decode(subject)
    ways = [_ways(part) for part in parts]
    if all(len(way) == 1 for way in ways):
        return ()
    mixes = islice(product(*ways), 1, MAX_SPELLINGS + 1)  # the first is the subject itself
    return tuple(encode(list(mix), what="subject", limit=8 * MAX_NAME_CHARS) for mix in mixes)


def _ways(part: Any) -> tuple[Any, ...]:
    """How an older version may have written ``part``: an int as itself or as the float
    equal to it."""
    if type(part) is not int or abs(part) >= _EXACT_FLOATS:
        return (part,)
    return (part, float(part), -0.0) if part == 0 else (part, float(part))


def subject_key(subject: str, namespace: str = "", claim: tuple[str, str] | None = None) -> str:
    """The idempotency key of an effect on ``subject``. A subject claimed for ever
    (``once_per`` alone) has one key, whichever run or step acts on it: a provider that
    deduplicates keys then deduplicates across runs too. A subject claimed for a time
    (``once_for``) is acted on again once each period ends, so each claim has a key of its
    own, from ``claim``, the claiming step's run and step id: a later period's effect is
    never taken for an earlier one's, by a provider's deduplication or by a probe that
    searches by key. A restart of a claim takes the key its intent recorded."""
    text = f"subject\x1f{namespace}\x1f{subject}"
    if claim is not None:
        text += "\x1fclaim\x1f" + json.dumps(list(claim))
    return KEY_PREFIX + sha256(text.encode()).hexdigest()[:40]
