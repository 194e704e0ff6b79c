"""Metrics and traces, read the way their consumers read them: Prometheus's text format
from a real HTTP endpoint, and spans from the OpenTelemetry SDK."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
from prometheus_client.parser import text_string_to_metric_families

import oncelog
from oncelog import metrics, tracing
from oncelog.console import _queries as queries

from .integration_agents.processes import require_framework, run_agent
from .support.alert_rules import documented_rules, fires
from .support.launch import python
from .support.operator_commands import oncelog_cli


class Declined(Exception):
    pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
                text = page.read().decode()
            break
        except OSError:
            assert time.monotonic() < deadline, "the endpoint never answered"
            time.sleep(0.05)
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def act_out(ledger: oncelog.Ledger, other: oncelog.Ledger) -> None:
    """One effect of each ending: done, refused, unknown, fenced off; and a pending
    approval and a global halt for the ledger's gauges."""

    @ledger.tool(kind="create", name="send", refusals=(Declined,))
    def send(n: int, *, idempotency_key: str) -> int:
        if n == 1:
            raise Declined
        if n == 2:
            raise TimeoutError("no answer")
        if n == 3:  # a person settles it, forced, while it runs: this worker is fenced off
            other.resolve("fenced", "s", "done", result=3, by="alice", force=True)
        return n

    @ledger.tool(kind="destructive", name="wipe")
    def wipe(*, idempotency_key: str) -> None: ...

    for _ in range(2):  # the second time, as after a restart, both are replayed: not counted
        with ledger.run("ok") as run:
            run.effect("s0", send, 0)
            with pytest.raises(oncelog.EffectRefused):
                run.effect("s1", send, 1)
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("lost") as run:
        run.effect("s", send, 2)
    with pytest.raises(oncelog.LeaseLost), ledger.run("fenced") as run:
        run.effect("s", send, 3)
    with pytest.raises(oncelog.ApprovalRequired), ledger.run("wiper") as run:
        run.effect("w", wipe)
    ledger.halt("maintenance", by="ops")


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    made = CollectorRegistry()
    observer = metrics.instrument(made)
    yield made
    metrics.uninstrument(observer)


def test_prometheus_endpoint(db_path: str, registry: CollectorRegistry) -> None:
    with oncelog.open(db_path) as ledger, oncelog.open(db_path) as other:
        act_out(ledger, other)
        port = free_port()
        metrics.serve(ledger, port=port, registry=registry)
        samples = scrape(port)
    effects = {
        dict(labels)["outcome"]: value
        for (name, labels), value in samples.items()
        if name == "oncelog_effects_total"
    }
    assert effects == {"done": 1, "refused": 1, "unknown": 1, "unrecorded": 1}
    create = (("kind", "create"),)
    assert samples[("oncelog_effect_duration_seconds_count", create)] == 4
    assert samples[("oncelog_fencing_rejections_total", ())] == 1
    assert samples[("oncelog_effects_in_doubt", (("kind", "create"), ("state", "unknown")))] == 1
    assert samples[("oncelog_approvals_pending", ())] == 1
    assert samples[("oncelog_halts_active", (("scope", "global"),))] == 1
    labels = {key for _, pairs in samples for key, _ in pairs}
    assert not labels & {"run_id", "run", "step_id", "key"}, "no unbounded labels"


def test_tool_spans_follow_the_genai_conventions(db_path: str) -> None:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = tracing.instrument(provider)
    try:
        with oncelog.open(db_path) as ledger, oncelog.open(db_path) as other:
            act_out(ledger, other)
    finally:
        tracing.uninstrument(observer)
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ["execute_tool send"] * 4  # replay: no span
    done = spans[0].attributes or {}
    assert done["gen_ai.operation.name"] == "execute_tool"
    assert done["gen_ai.tool.name"] == "send"
    assert done["gen_ai.tool.call.id"] == oncelog.idempotency_key("ok", "s0", "send")
    assert (done["oncelog.run_id"], done["oncelog.kind"], done["oncelog.attempt"]) == (
        "ok", "create", 1,
    )  # fmt: skip
    refused, unknown = (span.attributes or {} for span in spans[1:3])
    assert (refused["oncelog.outcome"], refused["error.type"]) == ("refused", "Declined")
    assert (unknown["oncelog.outcome"], unknown["error.type"]) == ("unknown", "TimeoutError")
    assert spans[1].status.status_code.name == "ERROR"


def test_oncelog_metrics_command_serves_the_ledger(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:
        ledger.halt("freeze", by="ops", agent="billing", ahead=True)
    port = free_port()
    server = subprocess.Popen(
        python("-m", "oncelog", "metrics", "--port", str(port), "--db", db_path),
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        samples = scrape(port)
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert samples[("oncelog_halts_active", (("scope", "agent"),))] == 1


@contextmanager
def metrics_command(db: str) -> Iterator[int]:
    """``oncelog metrics`` serving ``db``, in its own process; yields its port."""
    port = free_port()
    server = subprocess.Popen(
        python("-m", "oncelog", "metrics", "--port", str(port), "--db", db),
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield port
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_openmetrics_output_names_the_units(db_path: str) -> None:
    oncelog.open(db_path).close()  # `oncelog metrics` serves a ledger that exists
    with metrics_command(db_path) as port:
        scrape(port)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
        with urllib.request.urlopen(request, timeout=10) as page:
            text = page.read().decode()
    assert "# UNIT oncelog_effect_in_doubt_oldest_age_seconds seconds" in text
    registry = CollectorRegistry()
    observer = metrics.instrument(registry)
    metrics.uninstrument(observer)
    exposed: bytes = openmetrics(registry)  # type: ignore[no-untyped-call]  # untyped upstream
    assert "# UNIT oncelog_effect_duration_seconds seconds" in exposed.decode()


def test_an_in_flight_effect_is_orphaned_once_its_run_lets_go(ledger: oncelog.Ledger) -> None:
    seen: list[oncelog.EffectInDoubt] = []

    @ledger.tool(kind="create")
    def send(*, idempotency_key: str) -> None:
        seen.extend(ledger.effects_in_doubt())
        raise KeyboardInterrupt  # the process stops without recording an outcome

    with pytest.raises(KeyboardInterrupt), ledger.run("r") as run:
        run.effect("mail", send)
    (live,) = seen
    assert (live.step.step_id, live.state, live.orphaned) == ("mail", "in_flight", False)
    assert live.lease_owner is not None
    assert 0 <= live.age < 60
    (left,) = ledger.effects_in_doubt()
    assert (left.step.step_id, left.state, left.orphaned) == ("mail", "orphaned", True)
    assert left.age >= live.age


def test_a_dead_agents_effect_pages_once_its_lease_expires(tmp_path: Path) -> None:
    """An agent SIGKILLed mid-effect and left alone: once its lease lapses the effect is
    orphaned in `oncelog unknown`, the console and `oncelog metrics`, and the alert the
    docs recommend fires on that scrape."""
    require_framework("pydantic_ai", "pydantic-ai")
    db = str(tmp_path / "ledger.db")
    args = [
        "--ledger", db, "--effects", str(tmp_path / "effects.jsonl"),
        "--model-calls", str(tmp_path / "model-calls"), "--run", "ticket-9", "--lease-ttl", "1",
    ]  # fmt: skip
    killed = run_agent("pydantic_ai_agent", *args, crash_at="after_intent_commit@charge#1")
    assert killed.killed, killed

    deadline = time.monotonic() + 30
    while True:
        (row,) = json.loads(oncelog_cli(db, "unknown", "--json"))
        # Orphaned at once (its pid is gone): wait for the age the test reads.
        if (row["orphaned"] and row["age_seconds"] >= 1) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (row["step_id"], row["state"], row["orphaned"]) == ("charge#1", "in_flight", True)
    assert row["lease_owner"]  # the dead agent's: host|pid|start|namespace|nonce
    assert "orphaned: its run's lease has expired" in row["reason"]
    assert "oncelog resolve ticket-9 'charge#1'" in row["reason"]
    shown = oncelog_cli(db, "unknown")
    assert "ticket-9 charge#1 (charge, payment) orphaned" in shown
    assert "lease owner " in shown

    with oncelog.open(db) as ledger:
        (doubt,) = queries.doubts(ledger)["doubts"]
    assert (doubt.state, doubt.step.step_id) == ("orphaned", "charge#1")
    assert doubt.reason == queries.ORPHANED_REASON
    assert doubt.age > 0

    with metrics_command(db) as port:
        samples = scrape(port)
    orphaned = (("kind", "payment"), ("state", "orphaned"))
    assert samples[("oncelog_effects_in_doubt", orphaned)] == 1
    age = samples[("oncelog_effect_in_doubt_oldest_age_seconds", (("state", "orphaned"),))]
    assert age >= 1
    rules = documented_rules()
    assert fires(rules["OncelogEffectNeedsPerson"], samples)
    assert not fires(rules["OncelogEffectHung"], samples)
    assert not fires(rules["OncelogApprovalWaiting"], samples)
