"""Modules imported at their first use, for a module that reaches many and whose common
path needs few: ``stores/_sql_store.py`` names a dozen concerns (holds, queues, retention,
a person's decisions...) that neither an ``open()`` nor a run's steps use, and each one an
open imports costs it time (docs/benchmarks.md, Import time). Type checkers see the
imports themselves::

    if TYPE_CHECKING:
        from . import _sql_queue as queue
    else:
        defer(globals(), queue="._sql_queue")

The first attribute read on ``queue`` imports the module and puts it in ``queue``'s place,
so every later use is a plain global lookup.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any


def defer(namespace: dict[str, Any], **modules: str) -> None:
    """Bind each name in ``namespace`` (a module's ``globals()``) to a stand-in for the
    module given beside it, relative to the namespace's package."""
    for name, module in modules.items():
        namespace[name] = _Deferred(namespace, name, module)


class _Deferred:
    """A module not imported yet; reading an attribute imports it, in its place."""

    __slots__ = ("_module", "_name", "_namespace")

    def __init__(self, namespace: dict[str, Any], name: str, module: str) -> None:
        self._namespace = namespace
        self._name = name
        self._module = module

    def __getattr__(self, attribute: str) -> Any:
        module = import_module(self._module, self._namespace["__package__"])
        self._namespace[self._name] = module
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<module {self._module!r}, not imported yet>"
