"""A subject's fields through the MCP proxy, as their declared JSON Schema types make them
one subject whatever spelling the client sends.

A client's arguments come as JSON: a model may send an order id as ``42`` once and as
``42.0`` (or ``"42"``) the next time. Each field ``once_per`` names takes the type the
tool's input schema (or the proxy's config) declares for it:

- ``integer``: an int, or a float with no fraction below 2**53, as the int it equals;
- ``number``: an int or a float (``oncelog.tool`` writes ``42.0`` as ``42``);
- ``string``, ``boolean``, ``null``: a value of that type only.

Anything else is refused before the run records or sends anything: the string ``"42"``
for an integer (a server that coerces it would act on ``42``, but which strings a server
coerces, ``" 42"``, ``"4.2e1"``, ``"0x2A"``, is its own affair, and a guess that differs
from the server's would make one order two subjects), a number for a string (``42`` and
``42.0`` would be two strings), ``0`` or ``1`` for a boolean. A field whose type is not
declared keeps its value; its numbers are still canonical.

Nothing here imports MCP: a tool's input schema comes as the dict its server lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncelog import ConfigurationError

# JSON Schema's scalar types: the ones a subject's field may declare.
TYPES = ("integer", "number", "string", "boolean", "null")
# Below this every integer is exactly one float (``runtime/_subjects``).
_EXACT_FLOATS = 2**53
_MISFIT = object()


def declared_types(schema: Mapping[str, Any] | None, field: str) -> tuple[str, ...]:
    """The types the input schema declares for ``field``: its ``type`` (one or a list), or
    every branch's of an ``anyOf`` or ``oneOf`` (pydantic's ``int | None``); empty where
    any branch declares none."""
    spec = ((schema or {}).get("properties") or {}).get(field)
    if not isinstance(spec, Mapping):
        return ()
    branches = spec.get("anyOf") or spec.get("oneOf") or [spec]
    found: list[str] = []
    for branch in branches:
        named = branch.get("type") if isinstance(branch, Mapping) else None
        if named is None:
            return ()
        found += [named] if isinstance(named, str) else list(named)
    return tuple(dict.fromkeys(found))


def as_declared(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments with each field as the input schema's types make it (``42.0`` for an
    integer is ``42``), so that one call is one call however its numbers are spelt; a
    value its schema refuses stays as it came (a subject's field is refused later)."""
    made = {}
    for name, value in arguments.items():
        try:
            made[name] = typed("", name, value, declared_types(schema, name))
        except ConfigurationError:
            made[name] = value
    return made


def typed(tool: str, field: str, value: Any, types: tuple[str, ...]) -> Any:
    """``value`` as the declared ``types`` make it one subject; ``ConfigurationError``
    when it fits none of them."""
    if not types:
        return value
    for name in types:
        fit = _fit(name, value)
        if fit is not _MISFIT:
            return fit
    raise ConfigurationError(
        f"tool {tool!r}: argument {field!r} is {value!r}, not {' or '.join(types)} as the "
        "tool declares it; refused, so that one value is one subject"
    )


def _fit(name: str, value: Any) -> Any:
    kind = type(value)
    if name == "integer":
        if kind is int:
            return value
        if kind is float and value.is_integer() and abs(value) < _EXACT_FLOATS:
            return int(value)
    elif name == "number":
        if kind is int or kind is float:
            return value
    elif (name, kind) in (("string", str), ("boolean", bool)) or (name, value) == ("null", None):
        return value
    return _MISFIT
