"""An agent for the SIGTERM and waiting tests: ``count`` emails (``create`` effects), each
appending its idempotency key to a marker file between short random pauses, so signals
land before, inside and after calls. With ``--approval`` a ``destructive`` step needing a
person's approval comes first. It opens its ledger inside the agent, prints ``started``
once ``run_main`` has installed its SIGTERM handler, and exits through a plain
``oncelog.run_main`` (``--wait``: waiting up to that many seconds for a person).

Usage: clerk.py LEDGER RUN_ID MARKERS COUNT [--wait S] [--poll S] [--webhook URL]
       [--approval]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import oncelog


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("markers", type=Path)
    parser.add_argument("count", type=int)
    parser.add_argument("--wait", type=float, default=None)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--webhook", default=None)
    parser.add_argument("--approval", action="store_true")
    return parser.parse_args()


def pause() -> None:
    time.sleep(random.uniform(0.0, 0.02))


@oncelog.tool(kind="create", name="send")
def send(n: int, *, idempotency_key: str) -> dict[str, Any]:
    pause()
    with cfg.markers.open("a") as out:
        out.write(f"{idempotency_key}\n")
    pause()
    return {"sent": n}


@oncelog.tool(kind="destructive", name="wipe")
def wipe(*, idempotency_key: str) -> str:
    with cfg.markers.open("a") as out:
        out.write(f"{idempotency_key}\n")
    return "wiped"


def agent() -> None:
    print("started", flush=True)
    with (
        oncelog.open(cfg.ledger, approval_poll=cfg.poll, alert_webhook=cfg.webhook) as ledger,
        ledger.run(cfg.run_id) as run,
    ):
        if cfg.approval:
            run.effect("wipe", wipe)
        for n in range(cfg.count):
            run.effect(f"send-{n}", send, n)
    print("completed", flush=True)


if __name__ == "__main__":
    cfg = parse()
    oncelog.run_main(agent, wait_for_person=cfg.wait)
