"""An agent for the daily-budget attack: once FILE exists, COUNT effects costing 1.0
each, as fast as it can, in run RUN_ID of agent AGENT; each appends its key to MARKERS
when it really runs. Exits through ``oncelog.run_main`` (3 once the budget refuses).

Usage: agent_spender.py LEDGER RUN_ID AGENT MARKERS COUNT GO_FILE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import oncelog


def spend(ledger_url: str, run_id: str, agent: str, markers: Path, count: int) -> None:
    with oncelog.open(ledger_url) as ledger:

        @ledger.tool(kind="create", name="spend", cost=1.0)
        def spend_one(n: int, *, idempotency_key: str) -> int:
            with markers.open("a") as out:
                out.write(idempotency_key + "\n")
            return n

        with ledger.run(run_id, agent=agent) as run:
            for n in range(count):
                run.effect(f"spend-{n}", spend_one, n)


def main() -> None:
    ledger_url, run_id, agent, markers, count, go = sys.argv[1:7]
    while not Path(go).exists():  # all agents start their effects together
        time.sleep(0.005)
    oncelog.run_main(lambda: spend(ledger_url, run_id, agent, Path(markers), int(count)))


if __name__ == "__main__":
    main()
