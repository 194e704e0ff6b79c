"""The library's logger, made when something is first logged: ``logging`` (with the
``traceback``, ``string`` and ``textwrap`` it imports) is about a sixteenth of what an
agent pays from process start to its first step, and a run that logs nothing needs none of
it. ``log`` stands for ``logging.getLogger("oncelog")``: the handlers and level a program
sets on that logger apply, whenever it set them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from logging import Logger


class _Logger:
    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import logging

        return getattr(logging.getLogger("oncelog"), name)


log = cast("Logger", _Logger())
