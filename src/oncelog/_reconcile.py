"""Asking a tool's probe about an effect in doubt; what its answer means is ``_decide``'s."""

from __future__ import annotations

from typing import Any

from ._probes import CANNOT_TELL, Answer, Found, ProbeAnswer
from ._records import StepRecord
from ._tools import ToolSpec


def ask(spec: ToolSpec, record: StepRecord) -> tuple[ProbeAnswer, str]:
    """The probe's answer for ``record``, and a sentence for the journal. A probe that
    raises or answers something else cannot tell."""
    assert spec.probe is not None
    arguments: dict[str, Any] = record.args_payload
    try:
        answer = spec.probe(record.key, *arguments["args"], **arguments["kwargs"])
    except Exception as exc:
        return CANNOT_TELL, f"the probe raised {type(exc).__name__}: {exc}"
    if isinstance(answer, Found):
        return answer, "the probe found it at the provider"
    if isinstance(answer, Answer):
        return answer, f"the probe answered {answer.value}"
    return CANNOT_TELL, f"the probe answered {answer!r}, not Found, NOT_FOUND or CANNOT_TELL"
