"""What an agent recorded, made fit to show a person: the values of secret-looking keys
masked, wherever they sit. Declared secrets (``tool(secret=...)``) never reach the ledger
at all; this is the second line, for what nobody declared: the CLI and the console show
recorded payloads only through it."""

from __future__ import annotations

import re
from typing import Any

# Keys whose values are never shown, wherever they sit in a payload.
SECRET_KEY = re.compile(r"password|passwd|secret|token|api[_-]?key|authorization|card", re.I)
MASK = "••••••"


def redact(value: Any) -> Any:
    """``value`` with the values of secret-looking keys replaced by a mask, at any depth,
    whatever their type: a card number may be an int. (A model's ``prompt_tokens`` is
    masked too; a step's token counts are shown beside it.)"""
    if isinstance(value, dict):
        return {k: MASK if SECRET_KEY.search(k) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value
