"""An agent for the budget tests: a model call, then ``count`` paid effects costing 1.0
each, each appending its key to a marker file before answering (slowly, so kills land in
every window). Its run's budget allows ``limit`` of cost; at the limit it does what
``policy`` says (stop, pause or escalate, to ``webhook``).

Usage: spender.py LEDGER RUN_ID MARKERS COUNT LIMIT [POLICY [WEBHOOK]]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import oncelog


def main() -> None:
    ledger_path, run_id, markers, count, limit = sys.argv[1:6]
    policy = sys.argv[6] if len(sys.argv) > 6 else "stop"
    webhook = sys.argv[7] if len(sys.argv) > 7 else None
    ledger = oncelog.open(ledger_path)
    print("ready", flush=True)  # the crash-loop test times its kills from here, not from exec

    @ledger.tool(kind="upsert", name="buy_credit", cost=1.0)
    def buy_credit(n: int, *, idempotency_key: str) -> int:
        time.sleep(0.02)
        with Path(markers).open("a") as out:
            out.write(f"{idempotency_key}\n")
        time.sleep(0.02)
        return n

    def model() -> dict[str, object]:
        return {"text": "go", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}

    def agent() -> None:
        budget = oncelog.Budget(cost=float(limit), on_exceed=policy, warn_at=0.5, webhook=webhook)  # type: ignore[arg-type]
        with ledger.run(run_id, budget=budget) as run:
            run.llm("plan", model)
            for n in range(int(count)):
                run.effect(f"buy-{n}", buy_credit, n)

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
