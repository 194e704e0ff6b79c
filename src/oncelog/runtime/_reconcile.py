"""Asking a tool's probe about an effect in doubt, or its preflight before an attempt.
What an answer means is ``_decide``'s."""

from __future__ import annotations

from typing import Any

from ._probes import CANNOT_TELL, Answer, Conflict, Found, Preflight, PreflightAnswer, Probe


def ask(
    asked: Probe | Preflight | None, key: str, arguments: dict[str, Any], what: str
) -> tuple[PreflightAnswer, str]:
    """A probe's or a preflight's answer for the effect with ``key`` and these recorded
    ``arguments``, and a sentence for the journal. One that raises or answers something
    else cannot tell."""
    assert asked is not None
    try:
        answer = asked(key, *arguments["args"], **arguments["kwargs"])
    except Exception as exc:
        return CANNOT_TELL, f"the {what} raised {type(exc).__name__}: {exc}"
    if isinstance(answer, Found):
        return answer, f"the {what} found it at the provider"
    if isinstance(answer, Conflict) and what == "preflight":
        return answer, f"the preflight answered a conflict: {answer.reason}"
    if isinstance(answer, Answer):
        return answer, f"the {what} answered {answer.value}"
    return CANNOT_TELL, f"the {what} answered {answer!r}, not one of its answers"
