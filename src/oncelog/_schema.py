"""A small JSON Schema check, for the results a person gives (standard library only).

It knows the keywords that say what a tool's result looks like: ``type`` (one or a list),
``properties``, ``required``, ``additionalProperties``, ``items``, ``enum`` and ``const``.
Other keywords are not checked (a person's result may pass a rule this does not know;
the provider's own results are never checked here)."""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def problems(value: Any, schema: Any, where: str = "$") -> list[str]:
    """What in ``value`` does not match ``schema``, each as ``path: why``; empty if it does."""
    if not isinstance(schema, dict):
        return []
    found = _type_problems(value, schema, where)
    if found:
        return found
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: {value!r} is not {schema['const']!r}")
    if isinstance(value, dict):
        found += _object_problems(value, schema, where)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += problems(item, schema["items"], f"{where}[{i}]")
    return found


def _type_problems(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    wanted = schema.get("type")
    if wanted is None:
        return []
    names = wanted if isinstance(wanted, list) else [wanted]
    for name in names:
        kinds = _TYPES.get(name, ())
        # JSON has no booleans among its numbers: True is not an integer here.
        if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
            return []
        if name == "integer" and isinstance(value, float) and value.is_integer():
            return []  # 1.0 is an integer in JSON Schema
    return [f"{where}: expected {' or '.join(map(str, names))}, got {type(value).__name__}"]


def _object_problems(value: dict[str, Any], schema: dict[str, Any], where: str) -> list[str]:
    found = [
        f"{where}: {name!r} is required" for name in schema.get("required", []) if name not in value
    ]
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found += problems(item, properties[name], f"{where}.{name}")
        elif extra is False:
            found.append(f"{where}: {name!r} is not allowed")
        elif isinstance(extra, dict):
            found += problems(item, extra, f"{where}.{name}")
    return found
