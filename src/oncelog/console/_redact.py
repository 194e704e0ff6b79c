"""What an agent recorded, made fit to show a person: secrets masked, JSON laid out."""

from __future__ import annotations

import json
import re
from typing import Any

from .._serialization import decode

# Keys whose values are never shown, wherever they sit in a payload.
SECRET_KEY = re.compile(r"password|passwd|secret|token|api[_-]?key|authorization|card", re.I)
MASK = "••••••"
# In a journal entry, the parts the agent wrote; the rest is oncelog's own bookkeeping
# (a fencing "token" is a counter, not a secret).
AGENT_WRITTEN = ("args", "result", "error")
SHOWN_CHARS = 20_000  # a recorded payload may be a megabyte; a page shows the start


def redact(value: Any) -> Any:
    """``value`` with the values of secret-looking keys replaced by a mask, at any depth.
    Whatever their type: a card number may be an int. (A model's ``prompt_tokens`` is
    masked too; the timeline shows each step's token counts in a column of their own.)"""
    if isinstance(value, dict):
        return {k: MASK if SECRET_KEY.search(k) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def shown(text: str | None) -> str:
    """Recorded JSON text as a person reads it: decoded, redacted, indented, cut short."""
    if text is None:
        return ""
    try:
        value = decode(text)
    except ValueError:
        return _cut(f"(not JSON) {text}")
    return shown_value(value)


def shown_value(value: Any) -> str:
    """A decoded value as a person reads it (see ``shown``)."""
    return _dumped(redact(value))


def shown_entry(data: dict[str, Any]) -> str:
    """A journal entry's data as a person reads it: what the agent wrote, redacted."""
    return _dumped({k: redact(v) if k in AGENT_WRITTEN else v for k, v in data.items()})


def _dumped(value: Any) -> str:
    return _cut(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _cut(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}\n… ({len(text) - SHOWN_CHARS} more characters not shown)"
