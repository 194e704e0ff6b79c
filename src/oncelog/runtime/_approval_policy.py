"""What an approval asks of a step: whether it needs one (``tool(approval=...)``, a bool
or a function of the call's arguments), and which call a person's edit stands for.

A policy function is asked with the arguments as recorded (decoded from the canonical
JSON the ledger keeps), never with the live objects the model's code passed: an object
that compares as it likes, or a subclass, cannot answer differently from what is stored.
Its "yes" is durable: once a step asked a person, it asks again on every later attempt,
whatever a changed policy says. A policy that raises or answers other than a bool stops
the step before its intent (``ConfigurationError``): nothing is performed or written.

A person who approves other arguments (``Ledger.approve(..., args=...)``) journals an
``approval_edited``; a later start of the step, asked with the original arguments, runs
the edited call instead (edits of edits followed to the last), under its own request and
key, and the code receives its result.
"""

from __future__ import annotations

import inspect
from typing import Any

from .._exceptions import ConfigurationError
from ..records._argument_edits import INJECTED
from ..records._records import ApprovalEdit
from ..records._serialization import decode


def needs_approval(
    policy: Any, args_json: str, asked: bool, edited: bool, run_id: str, step_id: str
) -> bool:
    """Does this attempt need a person's approval?"""
    if type(policy) is bool:
        return policy or edited
    if edited or asked:
        return True
    payload = decode(args_json)
    try:
        answer = policy(*payload["args"], **payload["kwargs"])
    except Exception as exc:
        raise ConfigurationError(
            f"the approval function of step {step_id!r} failed: {type(exc).__name__}: {exc}; "
            "nothing was sent",
            run_id=run_id, step_id=step_id,
        ) from exc  # fmt: skip
    if type(answer) is not bool:
        raise ConfigurationError(
            f"the approval function of step {step_id!r} answered {answer!r:.80}, not True or "
            "False; nothing was sent",
            run_id=run_id, step_id=step_id,
        )  # fmt: skip
    return answer


def standing_edit(edits: tuple[ApprovalEdit, ...], args_hash: str) -> ApprovalEdit | None:
    """The edit that stands for a call asked with ``args_hash``: the last one made of its
    request, then of that edit's request, and so on."""
    found, seen = None, set()
    while args_hash not in seen:
        seen.add(args_hash)
        later = next((e for e in reversed(edits) if e.args_hash == args_hash), None)
        if later is None:
            break
        found, args_hash = later, later.edited_args_hash
    return found


def edited_arguments(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], edit: ApprovalEdit,
    secret: frozenset[str],
) -> dict[str, Any]:  # fmt: skip
    """The keyword arguments the tool is called with for ``edit``: its edited values, and
    the secret fields' values the code passed (the ledger holds their hashes only)."""
    called = dict(decode(edit.edited_args_json))
    if secret:
        given = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
        called.update({n: v for n, v in given.items() if n in secret and n not in INJECTED})
    return called
