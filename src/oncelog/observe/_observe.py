"""Hooks for metrics and traces: what the engine tells observers about each live step.

The core knows no metrics or tracing library; ``oncelog.metrics`` (Prometheus) and
``oncelog.tracing`` (OpenTelemetry) register observers here. With none registered, a step
pays one truth test of an empty list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class StepInfo:
    """The step an observer is told about."""

    run_id: str
    step_id: str
    tool: str
    kind: str  # read | upsert | create | payment | destructive | llm
    key: str
    attempt: int  # 0 for model calls and reads, which write no intent


class Observer(Protocol):
    def step_started(self, step: StepInfo) -> Any:
        """A live step is about to call out (its intent is durable if it is an effect);
        the value returned comes back to ``step_ended``."""
        ...

    def step_ended(self, step: StepInfo, started: Any, outcome: str, error: str | None) -> None:
        """``outcome``: done, refused, not_done (an idempotent call that raised), unknown,
        error (a model call or a read that raised: nothing recorded), or unrecorded (the
        call returned but its outcome could not be written: fenced off, or the store
        failed); ``error`` is the exception's type name, if there was one."""
        ...

    def fencing_rejected(self, run_id: str) -> None:
        """A write was refused because another worker holds the run now."""
        ...


OBSERVERS: list[Observer] = []


def add(observer: Observer) -> None:
    if observer not in OBSERVERS:
        OBSERVERS.append(observer)


def remove(observer: Observer) -> None:
    if observer in OBSERVERS:
        OBSERVERS.remove(observer)


def started(observers: Sequence[Observer], step: StepInfo) -> list[Any]:
    return [observer.step_started(step) for observer in observers]


def ended(
    observers: Sequence[Observer],
    step: StepInfo,
    tokens: list[Any],
    outcome: str,
    error: str | None,
) -> None:
    for observer, token in zip(observers, tokens, strict=False):
        observer.step_ended(step, token, outcome, error)


def fencing_rejected(observers: Sequence[Observer], run_id: str) -> None:
    for observer in observers:
        observer.fencing_rejected(run_id)
