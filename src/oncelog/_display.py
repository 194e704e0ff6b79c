"""What an agent recorded, made fit to show a person.

Recorded payloads: the values of secret-looking keys masked, wherever they sit. Declared
secrets (``tool(secret=...)``) never reach the ledger at all; this is the second line,
for what nobody declared: the CLI and the console show recorded payloads only through it.

The arguments of an approval request are the exception: a person approves exactly what
they read, so those are shown whole and unmasked (``exact_json``; declared secrets are
keyed hashes already), and ids as they are stored (``visible``)."""

from __future__ import annotations

import json
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


def visible(text: str) -> str:
    """An id as a person must read it: as is when every character shows and no space
    ends it, else JSON-quoted with the invisible characters escaped, so ``"victim "`` and
    ``victim`` never look alike."""
    if text and text.isprintable() and text == text.strip():
        return text
    return escape_invisible(json.dumps(text, ensure_ascii=False))


def exact_json(value: Any) -> str:
    """``value`` as indented JSON that decodes to exactly ``value``, hiding nothing: no
    key is masked, and characters that do not show (format controls such as a
    right-to-left override, zero-width or unusual spaces) are written as ``\\u`` escapes."""
    return escape_invisible(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def escape_invisible(json_text: str) -> str:
    """JSON text with the characters that do not show written as ``\\u`` escapes."""
    # Only string contents can hold such characters (JSON's own layout is spaces and
    # newlines), and a \u escape there stands for the same character.
    return "".join(c if c.isprintable() or c in "\n " else _u(c) for c in json_text)


def _u(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
