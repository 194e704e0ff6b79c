"""Numbers that enter the ledger from a person, a flag or the API, checked where they
enter: finite, in range, and whole where they count something. A NaN compares false with
every limit (a budget of ``nan`` stops nothing), an infinity has no JSON (a journal entry
holding one no longer decodes), and an integer past int64 overflows the store's driver;
so each is refused here, with a ``ConfigurationError`` naming the value, before anything
is written."""

from __future__ import annotations

import math
from datetime import timedelta

from ._exceptions import ConfigurationError

# The largest integer SQLite and PostgreSQL's BIGINT hold.
MAX_COUNT = (1 << 63) - 1
# The longest time a person or a setting may give: a hundred years, in seconds. Far past
# any wait that means something, and still a deadline ``time.time() + seconds`` can hold.
MAX_SECONDS = 100 * 365 * 24 * 3600.0


def count(value: object, what: str, *, least: int = 0, most: int = MAX_COUNT) -> int:
    """``value`` as a whole number from ``least`` to ``most``: an int (a bool is not one)
    or a float with no fraction, as a command line's ``steps=3`` arrives."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be a whole number, not {value!r}")
    if not least <= value <= most:
        raise ConfigurationError(f"{what} must be from {least} to {most}, not {value}")
    return value


def amount(value: object, what: str, *, positive: bool = False) -> float:
    """``value`` as a finite number, >= 0 (> 0 if ``positive``); a bool is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{what} must be a number, not {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int past the largest float
        raise ConfigurationError(f"{what} must be a finite number, not {value}") from None
    if not math.isfinite(number):
        raise ConfigurationError(f"{what} must be a finite number, not {value!r}")
    if number < 0 or (positive and number == 0):
        raise ConfigurationError(f"{what} must be {'> 0' if positive else '>= 0'}, not {value!r}")
    return number


def seconds(value: timedelta | object, what: str, *, positive: bool = True) -> float:
    """A length of time given in seconds or as a ``timedelta``, at most ``MAX_SECONDS``."""
    given = value.total_seconds() if isinstance(value, timedelta) else amount(value, what)
    number = amount(given, what, positive=positive)
    if number > MAX_SECONDS:
        raise ConfigurationError(f"{what} must be at most {MAX_SECONDS:g} seconds, not {value!r}")
    return number
