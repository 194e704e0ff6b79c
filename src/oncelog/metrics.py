"""Prometheus metrics (the ``metrics`` extra: ``pip install '.[metrics]'``).

Two sources, both with labels of bounded cardinality (tool, kind, outcome; never a run
id): what this process's runs did (``instrument()``: effects called and their durations,
fencing rejections), and what the ledger holds now (``LedgerCollector``, read at each
scrape: effects in doubt, active halts, pending approvals). ``watch_shipper`` adds a
journal shipper's progress (``oncelog.sinks.Shipper``), labelled by sink name.
``serve(ledger)`` exposes both on an HTTP endpoint; ``oncelog metrics`` runs one.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._exceptions import ConfigurationError
from ._extras import install_line
from .observe import _observe as observe
from .observe._observe import StepInfo
from .records._records import ApprovalStatus

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client import start_http_server as _start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigurationError(
        f"oncelog.metrics needs prometheus-client: {install_line('metrics')}"
    ) from exc

if TYPE_CHECKING:
    from ._ledger import Ledger
    from .audit._shipper import Shipper

# Seconds; effects are network calls: from a fast local write to a slow payment API.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# A scrape reads at most this many rows of each kind; more shows as this number.
SCRAPE_LIMIT = 10_000


class StepMetrics:
    """An observer that counts this process's live steps into ``registry``."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.effects = Counter(
            "oncelog_effects",
            "Effects called (not replayed), by how they ended: done, refused, not_done, unknown.",
            ["tool", "kind", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "oncelog_effect_duration_seconds",
            "From an effect's durable intent to its recorded outcome.",
            ["kind"],
            buckets=DURATION_BUCKETS,
            registry=registry,
            unit="seconds",
        )
        self.fencing = Counter(
            "oncelog_fencing_rejections",
            "Writes refused because another worker had taken the run over.",
            registry=registry,
        )

    def step_started(self, step: StepInfo) -> Any:
        return time.perf_counter() if step.attempt else None

    def step_ended(self, step: StepInfo, started: Any, outcome: str, error: str | None) -> None:
        if started is not None:
            self.duration.labels(step.kind).observe(time.perf_counter() - started)
            self.effects.labels(step.tool, step.kind, outcome).inc()

    def fencing_rejected(self, run_id: str) -> None:
        self.fencing.inc()


class LedgerCollector(Collector):
    """What the ledger holds, read at each scrape."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._in_doubt()
        halts = GaugeMetricFamily(
            "oncelog_halts_active", "Kill switches that are on, by scope.", labels=["scope"]
        )
        scopes: dict[str, int] = {}
        for halt in self.ledger.halts(active_only=True, limit=SCRAPE_LIMIT):
            scopes[halt.scope.value] = scopes.get(halt.scope.value, 0) + 1
        for scope in ("global", "agent", "run"):
            halts.add_metric([scope], scopes.get(scope, 0))
        yield halts
        pending = self.ledger.approvals(status=ApprovalStatus.PENDING, limit=SCRAPE_LIMIT)
        yield GaugeMetricFamily(
            "oncelog_approvals_pending", "Effects waiting for a person's approval.", len(pending)
        )
        yield from self._size()

    def _size(self) -> Iterator[GaugeMetricFamily]:
        """How much the ledger holds: what retention (``oncelog prune``) keeps in check."""
        size = self.ledger.size()
        rows = GaugeMetricFamily(
            "oncelog_ledger_rows", "Rows the ledger holds, by table.", labels=["table"]
        )
        for table, count in (("runs", size.runs), ("steps", size.steps),
                             ("journal", size.records)):  # fmt: skip
            rows.add_metric([table], count)
        yield rows
        if size.bytes is not None:
            yield GaugeMetricFamily(
                "oncelog_ledger_size_bytes", "The ledger's database on disk.", size.bytes
            )
        if size.oldest_run_at is not None:
            yield GaugeMetricFamily(
                "oncelog_ledger_oldest_run_created_timestamp_seconds",
                "When the oldest run the ledger holds was created (Unix seconds).",
                size.oldest_run_at,
            )

    def _in_doubt(self) -> Iterator[GaugeMetricFamily]:
        in_doubt = GaugeMetricFamily(
            "oncelog_effects_in_doubt",
            "Effects whose outcome is not recorded, by kind and state: unknown (found in "
            "doubt), orphaned (in flight, its run's lease expired or its process is gone: nobody "
            "is running it) or "
            "in_flight (its process holds the run and may still be running it).",
            labels=["kind", "state"],
        )
        oldest = GaugeMetricFamily(
            "oncelog_effect_in_doubt_oldest_age_seconds",
            "Age of the oldest effect in doubt in each state, from its intent (store's clock).",
            labels=["state"],
            unit="seconds",
        )
        counted: dict[tuple[str, str], int] = {}
        ages: dict[str, float] = {}
        for doubt in self.ledger.effects_in_doubt(limit=SCRAPE_LIMIT):
            label = (doubt.step.kind, doubt.state)
            counted[label] = counted.get(label, 0) + 1
            ages[doubt.state] = max(ages.get(doubt.state, 0.0), doubt.age)
        for label, count in sorted(counted.items()):
            in_doubt.add_metric(list(label), count)
        for state in ("unknown", "orphaned", "in_flight"):
            oldest.add_metric([state], ages.get(state, 0.0))
        yield from (in_doubt, oldest)


class ShipperCollector(Collector):
    """The journal shippers watched in one registry, read at each scrape."""

    def __init__(self) -> None:
        self.shippers: dict[str, Shipper] = {}

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        shipped = CounterMetricFamily(
            "oncelog_sink_shipped", "Journal lines (records, checkpoints) a sink took.",
            labels=["sink"],
        )  # fmt: skip
        failures = CounterMetricFamily(
            "oncelog_sink_failures", "Batches a sink did not take (each is tried again).",
            labels=["sink"],
        )  # fmt: skip
        lag = GaugeMetricFamily(
            "oncelog_sink_lag_records",
            "Journal records and checkpoints not yet shipped to a sink (by id, at the last look).",
            labels=["sink"],
        )
        for name, shipper in sorted(self.shippers.items()):
            shipped.add_metric([name], shipper.shipped)
            failures.add_metric([name], shipper.failures)
            lag.add_metric([name], shipper.lag)
        yield from (shipped, failures, lag)


_SHIPPER_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, ShipperCollector] = (
    weakref.WeakKeyDictionary()
)


def watch_shipper(shipper: Shipper, registry: CollectorRegistry = REGISTRY) -> None:
    """Expose the shipper's counters in ``registry``: ``oncelog_sink_shipped_total``,
    ``oncelog_sink_failures_total`` and ``oncelog_sink_lag_records``, labelled with its
    sink's name (unique per registry)."""
    collector = _SHIPPER_COLLECTORS.get(registry)
    if collector is None:
        collector = _SHIPPER_COLLECTORS[registry] = ShipperCollector()
        registry.register(collector)
    if shipper.name in collector.shippers:
        raise ConfigurationError(f"a shipper to a sink named {shipper.name!r} is watched already")
    collector.shippers[shipper.name] = shipper


def instrument(registry: CollectorRegistry = REGISTRY) -> StepMetrics:
    """Count this process's steps into ``registry``; returns the observer (pass it to
    ``uninstrument`` to stop)."""
    metrics = StepMetrics(registry)
    observe.add(metrics)
    return metrics


def uninstrument(metrics: StepMetrics) -> None:
    observe.remove(metrics)


def serve(
    ledger: Ledger,
    port: int = 9464,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry = REGISTRY,
) -> None:
    """Expose ``/metrics`` on ``addr:port`` from a background thread: this process's
    steps and the ledger's state."""
    registry.register(LedgerCollector(ledger))
    _start_http_server(port, addr=addr, registry=registry)
