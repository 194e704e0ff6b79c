"""OpenTelemetry spans for tool calls (the ``otel`` extra: ``pip install '.[otel]'``).

Each effect that is called (not replayed) becomes a span named ``execute_tool {tool}``,
following the GenAI semantic conventions for tool execution (``gen_ai.operation.name``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id`` — the idempotency key, stable across
retries), plus ``oncelog.*`` attributes: run, step, kind, attempt and outcome. A replayed
step calls nothing, so it makes no span. Spans go to whatever tracer provider the
application configured; oncelog configures no exporter.
"""

from __future__ import annotations

from typing import Any

from ._exceptions import ConfigurationError
from ._extras import install_line
from .observe import _observe as observe
from .observe._observe import StepInfo

try:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigurationError(
        f"oncelog.tracing needs opentelemetry-api: {install_line('otel')}"
    ) from exc

# Outcomes after which the call did not do what was asked, or may not have.
_FAILED = frozenset({"refused", "not_done", "unknown", "error", "unrecorded"})


class ToolSpans:
    """An observer that opens a span around each called effect."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("oncelog", tracer_provider=tracer_provider)

    def step_started(self, step: StepInfo) -> Any:
        if not step.attempt:  # model calls and reads are not tool executions
            return None
        return self.tracer.start_span(
            f"execute_tool {step.tool}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": step.tool,
                "gen_ai.tool.call.id": step.key,
                "gen_ai.tool.type": "function",
                "oncelog.run_id": step.run_id,
                "oncelog.step_id": step.step_id,
                "oncelog.kind": step.kind,
                "oncelog.attempt": step.attempt,
            },
        )

    def step_ended(self, step: StepInfo, started: Any, outcome: str, error: str | None) -> None:
        if started is None:
            return
        started.set_attribute("oncelog.outcome", outcome)
        if outcome in _FAILED:
            started.set_attribute("error.type", error or outcome)
            started.set_status(Status(StatusCode.ERROR, outcome))
        started.end()

    def fencing_rejected(self, run_id: str) -> None:
        pass


def instrument(tracer_provider: trace.TracerProvider | None = None) -> ToolSpans:
    """Trace this process's tool calls; returns the observer (for ``uninstrument``)."""
    spans = ToolSpans(tracer_provider)
    observe.add(spans)
    return spans


def uninstrument(spans: ToolSpans) -> None:
    observe.remove(spans)
