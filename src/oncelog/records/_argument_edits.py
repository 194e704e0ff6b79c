"""Arguments a person edits before approving a call: the tool's parameters (its *shape*,
journalled with each approval request, since whoever approves runs none of the agent's
code), the check of an edit against them, and the changes shown beside a decision.

An edit names every parameter the call needs by name, as ``oncelog approvals`` shows the
request: unknown names and missing required ones are refused, and so is a new value for a
secret field (the ledger holds only its keyed hash; the agent keeps the value it had). A
tool taking ``*args`` or ``**kwargs`` has no shape: its calls cannot be edited.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .._exceptions import InvalidPayload
from ._serialization import canonical_json, decode

# What oncelog hands a tool itself: never the model's, never a person's to edit.
INJECTED = frozenset({"idempotency_key", "fencing_token", "hold_token"})


def edit_shape(fn: Callable[..., Any], secret: Iterable[str]) -> str | None:
    """The parameters of ``fn`` a person may give, as JSON (names in order, the required
    ones, the secret ones); None if a parameter cannot be given by name."""
    # Imported here: a tool's declaration needs it, an ``open()`` (which shows edits) not.
    import inspect

    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = [p for p in inspect.signature(fn).parameters.values() if p.name not in INJECTED]
    if any(p.kind not in by_name for p in params):
        return None
    names = [p.name for p in params]
    return canonical_json({
        "names": names,
        "required": [p.name for p in params if p.default is inspect.Parameter.empty],
        "secret": sorted(set(secret) & set(names)),
    })  # fmt: skip


def named(shape: dict[str, Any], payload: Any) -> dict[str, Any]:
    """A recorded call (``{"args": [...], "kwargs": {...}}``) by parameter name."""
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    return {**dict(zip(shape["names"], args, strict=False)), **kwargs}


def same_by_name(fn: Callable[..., Any], one: Any, other: Any) -> bool:
    """Whether two recorded calls of ``fn`` (``{"args": [...], "kwargs": {...}}``) give
    every parameter the same value, however each was passed: ``refund("o-1", 50)`` and a
    person's edit of it, ``refund(order="o-1", amount=50)``, are one call. Defaults are
    not filled in: one may have changed since a call was recorded. Values compare as
    their canonical JSON, not by Python's ``==``: ``42`` and ``42.0``, ``1`` and ``True``
    stay two calls, as their recorded texts are."""
    import inspect  # only for calls whose recorded texts differ

    if not all(isinstance(p, dict) and set(p) == {"args", "kwargs"} for p in (one, other)):
        return False
    try:
        signature = inspect.signature(fn)
        bound = [signature.bind_partial(*p["args"], **p["kwargs"]).arguments for p in (one, other)]
    except (TypeError, ValueError):  # no signature, or a call that does not fit it
        return False
    return canonical_json(dict(bound[0])) == canonical_json(dict(bound[1]))


def checked_edit(
    shape_json: str | None, args_json: str, edited: Any, where: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The original call and ``edited`` by parameter name, in the tool's order, once
    ``edited`` fits the tool; ``InvalidPayload`` saying what does not."""
    if shape_json is None:
        raise InvalidPayload(
            "this request's arguments cannot be edited: its tool takes *args or **kwargs, or "
            "the request was made before edits were possible; approve or deny it as asked",
            **where,
        )
    if not isinstance(edited, dict):
        raise InvalidPayload(
            f"edited arguments must be a JSON object of parameter names, not {edited!r:.80}",
            **where,
        )
    shape = decode(shape_json)
    original = named(shape, decode(args_json))
    names, given = shape["names"], set(edited)
    unknown = sorted(given - set(names))
    missing = [n for n in shape["required"] if n not in given]
    if unknown or missing:
        said = [f"unknown parameter {n!r}" for n in unknown]
        said += [f"missing parameter {n!r}" for n in missing]
        raise InvalidPayload(
            f"the edited arguments do not fit the tool ({', '.join(said)}); it takes "
            f"{', '.join(names)}",
            **where,
        )
    for name in shape["secret"]:
        if name in edited and edited[name] != original.get(name):
            raise InvalidPayload(
                f"{name!r} is a secret field: the ledger holds only its keyed hash, so it "
                "cannot be edited; give it as the request shows it",
                **where,
            )
    return original, {n: edited[n] for n in names if n in given}


def edited_payload_json(edited: dict[str, Any]) -> str:
    """How the edited call is recorded (and its request hashed): every argument by name."""
    return canonical_json({"args": [], "kwargs": edited})


def argument_changes(original: dict[str, Any], edited: dict[str, Any]) -> list[str]:
    """What an edit changed, one line per parameter: ``amount: 150 → 100``."""
    lines = []
    for name in [*original, *(n for n in edited if n not in original)]:
        before, after = original.get(name, _ABSENT), edited.get(name, _ABSENT)
        if before != after:
            lines.append(f"{name}: {_shown(before)} → {_shown(after)}")
    return lines


_ABSENT: Any = object()


def _shown(value: Any) -> str:
    return "(default)" if value is _ABSENT else canonical_json(value)
