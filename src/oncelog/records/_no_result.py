"""``NO_RESULT``: the answer of an effect a person resolved ``done`` without its result."""

from __future__ import annotations

from typing import ClassVar, Final


class NoResult:
    """The type of ``oncelog.NO_RESULT``, its only value."""

    _instance: ClassVar[NoResult | None] = None

    def __new__(cls) -> NoResult:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "oncelog.NO_RESULT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NO_RESULT"  # pickled by name: unpickling gives this very object


NO_RESULT: Final = NoResult()
"""What an effect returns, live and on every replay, when a person resolved it ``done``
without the provider's answer (``oncelog resolve ... done --no-result``). It is not None
(a tool that returned None returns None), it is false, and it cannot be recorded: passed
into another step's arguments it is refused (``UnserializableValue``)."""
