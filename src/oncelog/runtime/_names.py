"""The names the ledger keys on (run ids, step ids, agents) and the free text a person or
code gives with a change (who, a note, a reason), checked before anything is written.

A lone surrogate (``"\\ud800"``, which ``os.fsdecode`` makes of bytes that are not UTF-8)
is a Python string that no UTF-8 column can hold; a NUL cannot be in a PostgreSQL text
value. A name must be the same on every store, so both are refused in names; free text
only has to be encodable.
"""

from __future__ import annotations

from .._exceptions import ConfigurationError

MAX_NAME_CHARS = 512


def check_name(
    value: object, what: str, *, run_id: str | None = None, step_id: str | None = None
) -> str:
    """``value`` if it can name a run, a step or an agent; ``ConfigurationError`` if not."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ConfigurationError(
            f"{what} must be a non-empty string of at most {MAX_NAME_CHARS} chars, "
            f"not {_shown(value)}",
            run_id=run_id,
            step_id=step_id,
        )
    if "\x00" in value:
        raise ConfigurationError(
            f"{what} {_shown(value)} holds a NUL character", run_id=run_id, step_id=step_id
        )
    check_text(value, what, run_id=run_id, step_id=step_id)
    return value


def check_text(
    value: str | None, what: str, *, run_id: str | None = None, step_id: str | None = None
) -> None:
    """Free text UTF-8 can hold (None passes)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{what} must be a string, not {_shown(value)}", run_id=run_id, step_id=step_id
        )
    if value.isascii():
        return
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ConfigurationError(
            f"{what} holds a lone surrogate {value[exc.start]!r} at index {exc.start}, "
            "which UTF-8 cannot store",
            run_id=run_id,
            step_id=step_id,
        ) from None


def _shown(value: object) -> str:
    """``value``'s repr, cut short: it may be a whole document passed by mistake."""
    shown = repr(value)
    return shown if len(shown) <= 100 else shown[:100] + "…"
