"""An effect's subject: what it acts on, named by its tool's ``once_per`` from the call's
arguments, as the one text every run and store compares, and the idempotency key that
derives from it."""

from __future__ import annotations

import json
import math
from hashlib import sha256
from typing import Any

from .._exceptions import ConfigurationError, InvalidPayload
from ..records._serialization import encode
from ._calls import KEY_PREFIX
from ._names import MAX_NAME_CHARS, check_text
from ._tools import ToolSpec

_SCALARS = (str, int, float, bool, type(None))


def subject_text(spec: ToolSpec, payload: Any, run_id: str, step_id: str) -> str:
    """The canonical JSON list of the subject ``spec.once_per`` makes of the arguments
    (a string is a list of one); ``ConfigurationError`` for anything but a string or a
    tuple (or list) of JSON scalars, or for a ``once_per`` that raises."""
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
    try:
        text = encode(list(parts), what="subject", limit=4 * MAX_NAME_CHARS)
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
