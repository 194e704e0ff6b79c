"""What an agent recorded, made fit to show a person: secrets masked, JSON laid out; the
arguments of an approval request shown exactly and whole."""

from __future__ import annotations

import json
from typing import Any

from oncelog.display import escape_invisible, exact_json, redact

# In a journal entry, the parts the agent wrote; the rest is oncelog's own bookkeeping
# (a fencing "token" is a counter, not a secret).
AGENT_WRITTEN = ("args", "result", "error")
SHOWN_CHARS = 20_000  # a recorded payload may be a megabyte; a page shows the start


def shown(text: str | None) -> str:
    """Recorded JSON text as a person reads it: decoded, redacted, indented, cut short."""
    if text is None:
        return ""
    try:
        value = json.loads(text)
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


def approved(text: str) -> str:
    """An approval request's recorded arguments, exactly: nothing masked but the fields
    the tool declares secret (recorded as ``redacted:<hmac>``), nothing cut, invisible
    characters escaped. The page shows the start of a long one and says so."""
    try:
        return exact_json(json.loads(text))
    except ValueError:
        return escape_invisible(f"(not JSON) {text}")
