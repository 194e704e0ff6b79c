"""How long after a kill switch's commit in another process a model call of a running
agent is stopped: the interval in which one that starts may still run.

This process holds a ledger with a run in flight and its switches kept in memory; a
child process sets a switch for the run's agent with plain SQL on a connection of its
own (the trigger announces it as it announces ``oncelog halt``'s), timing its COMMIT on
``CLOCK_MONOTONIC``, which one machine's processes share. Meanwhile this process looks
at the switch as a model call does before it runs (``HaltWatch.covers_none``) in a tight
loop, and notes the first look that no longer answers "no switch" from memory: from that
instant every model call asks the server, which has the switch. The child then clears it,
and the next repetition starts once the memory is trusted again.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from _overhead.machine import load_average

import oncelog

from .stores import Store

_SETTER = """
import json, sys, time, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=False)
for line in sys.stdin:
    if line.strip() == "set":
        conn.execute("INSERT INTO halts (scope, target, reason, set_by, set_at) "
                     "VALUES ('agent', 'bench', 'bench', 'bench', 0)")
    else:
        conn.execute("UPDATE halts SET cleared_at = 1, cleared_by = 'bench' "
                     "WHERE cleared_at IS NULL")
    sent = time.monotonic()
    conn.commit()
    print(json.dumps([sent, time.monotonic()]), flush=True)
"""
SPIN_LIMIT = 5.0  # seconds a look waits for a notification before the run is abandoned


@dataclass(frozen=True)
class Latency:
    after_commit_ms: list[float]  # stopped, from the COMMIT's return in the setter
    after_sent_ms: list[float]  # stopped, from the COMMIT's sending: an upper bound
    load: tuple[str, str]


def _order(setter: subprocess.Popen[str], what: str) -> tuple[float, float]:
    assert setter.stdin is not None
    assert setter.stdout is not None
    setter.stdin.write(what + "\n")
    setter.stdin.flush()
    sent, returned = json.loads(setter.stdout.readline())
    return float(sent), float(returned)


def _until(check: Any, limit: float = SPIN_LIMIT) -> float:
    deadline = time.monotonic() + limit
    while True:
        now = time.monotonic()
        if check():
            return now
        if now > deadline:
            raise SystemExit("no notification arrived within the limit")


def measure_latency(store: Store, reps: int) -> Latency:
    started = load_average()
    after_commit, after_sent = [], []
    with (
        store.fresh("halt-latency") as url,
        oncelog.open(url, lease_ttl=3600) as ledger,
        ledger.run("latency", agent="bench") as run,
    ):
        run.llm("first", lambda: {"text": "ok"})
        watch = ledger.store.halt_watch  # type: ignore[attr-defined]
        setter = subprocess.Popen(
            [sys.executable, "-c", _SETTER, url], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            for _ in range(reps):
                _until(lambda: watch.covers_none("latency", "bench"))
                time.sleep(0.05)  # the listener's thread at rest, as between two calls
                sent, returned = _order(setter, "set")
                # The look began before the COMMIT was sent (the loop spins from the start).
                seen = _until(lambda: not watch.covers_none("latency", "bench"))
                after_commit.append((seen - returned) * 1000)
                after_sent.append((seen - sent) * 1000)
                _order(setter, "clear")
        finally:
            assert setter.stdin is not None
            setter.stdin.close()
            setter.wait(timeout=30)
    return Latency(after_commit, after_sent, (started, load_average()))


def render_latency(result: Latency) -> str:
    def summary(values: list[float]) -> str:
        ordered = sorted(values)
        p99 = ordered[max(0, round(0.99 * len(ordered)) - 1)]
        return (
            f"median {statistics.median(ordered):.3f} ms, p99 {p99:.3f} ms, "
            f"max {ordered[-1]:.3f} ms"
        )

    return "\n".join([
        f"A kill switch set by another process, {len(result.after_commit_ms)} times; load "
        f"average {result.load[0]} at start, {result.load[1]} at end. The first look of a "
        "model call that no longer answers from memory (the notification has arrived):",
        f"- after the setter's COMMIT returned: {summary(result.after_commit_ms)}",
        f"- after the setter sent its COMMIT (an upper bound): {summary(result.after_sent_ms)}",
    ])  # fmt: skip
