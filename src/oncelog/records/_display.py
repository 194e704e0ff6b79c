"""What a person is shown: credentials masked, ledger text made printable. Public as
``oncelog.display``, whose docstring says what is masked and why."""

from __future__ import annotations

import json
import re
from typing import Any

from .._commands import oncelog_command
from .._exceptions import DECISIONS, decide_commands, decide_text, resolve_command

__all__ = [
    "DECISIONS", "MASK", "decide_commands", "decide_text", "escape_invisible", "exact_json",
    "oncelog_command", "printable", "redact", "resolve_command", "visible",
]  # fmt: skip

# The patterns are compiled when first used (``re``'s own cache), not when a ledger is
# opened: most processes never show a value. Keys whose text values are never shown.
# ``token`` as a word only: ``access_token`` and ``accessToken`` are credentials,
# ``prompt_tokens`` and ``max_tokens`` are counts.
SECRET_KEY = (
    r"(?i)password|passwd|secret|api[_-]?key|authorization|cookie|card|cvc|cvv|"
    r"token(?![a-z])|credential|private[_-]?key"
)
# Text that is a credential whatever key it is under.
CREDENTIAL = (
    r"(?i)^\s*(?:(?:bearer|basic)\s+\S{8,}|(?:sk|rk|pk)_(?:live|test)_\w{8,}|gh[pousr]_\w{20,}"
    r"|xox[abpr]-[\w-]{10,}|AKIA[0-9A-Z]{16}|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)
CARD_NUMBER = r"^\d(?:[ -]?\d){12,18}$"
MASK = "••••••"


def redact(value: Any, key: str = "") -> Any:
    """``value`` with every credential replaced by a mask, at any depth (``key``: the key
    ``value`` sits under, if any)."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return value
    text = str(value)
    if (key and re.search(SECRET_KEY, key)) or _is_card_number(text):
        return MASK
    return MASK if isinstance(value, str) and re.match(CREDENTIAL, text) else value


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


def printable(text: str) -> str:
    """``text`` fit for a terminal or a log line: every character that does not show
    (C0 and C1 controls, DEL, ESC, CR, LF, tab, right-to-left overrides and other format
    characters) written as an escape (``\\n``, ``\\x1b``, ``\\u202e``), so what an agent
    recorded cannot move the cursor, recolour the screen, reorder a line or start a new
    row of a listing. Print each line through it, not text holding several."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else _u(char))


def _u(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _is_card_number(text: str) -> bool:
    """Digits a payment card number could be: 13 to 19 of them, passing the Luhn check."""
    if not re.match(CARD_NUMBER, text):
        return False
    digits = [int(d) for d in text if d.isdigit()][::-1]
    total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(digits))
    return total % 10 == 0
