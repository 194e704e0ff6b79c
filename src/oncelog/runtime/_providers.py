"""A provider's promises about idempotency keys, declared once and given to a tool.

``tool(provider=...)`` takes the provider's published dedupe window, its classifier of
the answers to a repeated key and, where one ships, its probe. What the tool declares
itself wins (a classifier of its own is asked after the provider's documented answers to
a repeated key, which a status code alone misreads), with one exception: a
``dedupe_window`` longer than the provider publishes is refused, because inside it
oncelog would resend a key the provider may have forgotten (a duplicate waiting to
happen). A provider that publishes no window gives none: an effect in doubt then halts
unless a probe settles it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from .._exceptions import ConfigurationError
from .._log import log
from ..failures import Classifier, first
from ..failures.keys import KeyAnswer, answers
from ._probes import Probe


@dataclass(frozen=True)
class Provider:
    """What a provider documents about its idempotency keys; ``sources`` say where.

    ``key_field``: the header (or body field) that carries the key. ``dedupe_window``:
    how long it answers a repeated key with the first request's result (None:
    unpublished). ``in_progress``: its answer to a key whose first request still runs;
    ``mismatch``: to the key with other parameters (None: undocumented). ``failures``:
    a classifier for its own client's errors, tried before those two answers. ``probe``:
    a function returning the probe that finds its effects by key, called when a tool
    declares the provider (it may import a client: the probe lives with its surface)."""

    name: str
    key_field: str
    dedupe_window: timedelta | None
    in_progress: KeyAnswer | None
    mismatch: KeyAnswer | None
    sources: tuple[str, ...]
    failures: Classifier | None = None
    probe: Callable[[], Probe] | None = None
    notes: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.key_field:
            raise ConfigurationError("a provider needs its name and its key's field")
        if self.dedupe_window is not None and self.dedupe_window <= timedelta(0):
            raise ConfigurationError(
                f"{self.name}'s dedupe_window must be positive or None (unpublished), "
                f"not {self.dedupe_window}"
            )
        if not self.sources:
            # A figure nobody can check is a guess, and a guessed window is a duplicate.
            raise ConfigurationError(f"{self.name}: say where its figures are published")

    @property
    def key_answers(self) -> Classifier:
        """Its documented answers to a repeated key (``oncelog.failures.keys``)."""
        return answers(in_progress=self.in_progress, mismatch=self.mismatch)

    @property
    def classify(self) -> Classifier:
        """Its client's classifier, then its documented answers to a repeated key."""
        if self.failures is None:
            return self.key_answers
        return first(self.failures, self.key_answers)


def importing(module: str, name: str) -> Callable[[], Probe]:
    """A probe named by its module, imported only when a tool declares the provider."""

    def load() -> Probe:
        probe: Probe = getattr(importlib.import_module(module), name)
        return probe

    return load


def with_provider(
    provider: Provider | None,
    probe: Probe | None,
    window: float | None,
    failures: Classifier | None,
) -> tuple[Probe | None, float | None, Classifier | None]:
    """The tool's probe, dedupe window (seconds) and classifier once ``provider`` is
    applied: the tool's own win; a window longer than the provider's is refused."""
    if provider is None:
        return probe, window, failures
    if not isinstance(provider, Provider):
        raise ConfigurationError(
            f"provider must be an oncelog.providers.Provider, not {provider!r}"
        )
    published = provider.dedupe_window
    if published is not None and window is not None and window > published.total_seconds():
        raise ConfigurationError(
            f"dedupe_window ({window:g} s) is longer than {provider.name}'s published "
            f"window ({published.total_seconds():g} s): a resend after that may reach a "
            "provider that forgot the key, and act twice"
        )
    if window is None and published is not None:
        window = published.total_seconds()
    if probe is None and provider.probe is not None:
        probe = _load(provider)
    # A tool's own classifier replaces the provider client's, but never its documented
    # answers to a repeated key: read by status alone, a 409 "in use" would be in doubt
    # (and resent) and a 400 "other parameters" refused (recorded failed, maybe paid).
    classify = provider.classify if failures is None else first(provider.key_answers, failures)
    return probe, window, classify


def _load(provider: Provider) -> Probe | None:
    """The provider's probe, or None (an effect in doubt then halts) when its client is
    not installed."""
    assert provider.probe is not None
    try:
        return provider.probe()
    except ImportError as exc:
        log.warning(
            "%s's probe is not available (%s): effects in doubt halt for a person; "
            "install its client or pass probe=", provider.name, exc,
        )  # fmt: skip
        return None
