"""An agent for the kill-switch tests: ``count`` email effects, each appending its key to
a marker file, exiting through ``oncelog.run_main`` (3 when halted).

Usage: looper.py LEDGER RUN_ID AGENT MARKERS COUNT [--pause-after N --go FILE]
       [--detector-halt-after N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import oncelog


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("agent")
    parser.add_argument("markers", type=Path)
    parser.add_argument("count", type=int)
    parser.add_argument("--pause-after", type=int, help="wait for --go after this many")
    parser.add_argument("--go", type=Path)
    parser.add_argument("--detector-halt-after", type=int)
    options = parser.parse_args()
    ledger = oncelog.open(options.ledger)

    @ledger.tool(kind="create", name="send_email")
    def send_email(n: int, *, idempotency_key: str) -> dict[str, int]:
        with options.markers.open("a") as markers:
            markers.write(idempotency_key + "\n")
        return {"sent": n}

    def agent() -> None:
        with ledger.run(options.run_id, agent=options.agent) as run:
            for n in range(options.count):
                if n == options.pause_after and options.go is not None:
                    while not options.go.exists():
                        time.sleep(0.01)
                if n == options.detector_halt_after:
                    run.halt("account locked out", by="lockout-detector")
                run.effect(f"email-{n}", send_email, n)

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
