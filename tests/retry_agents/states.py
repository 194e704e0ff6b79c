"""One agent for every state a step or a run can be left in (``test_ways_out.py``): it
charges nothing, it sends one message, and the provider (here, a file the tool appends
to, outside the ledger) misbehaves as the scenario needs while MODE is ``fail``.

Usage: states.py LEDGER RUN_ID SCENARIO COUNT_FILE MODE

Exits through ``oncelog.run_main``: 0 completed, 1 an error (abandoned, denied), 3 a
person must act (refused, out of retries, in doubt...), 4 waiting for a person.
"""

from __future__ import annotations

import sys
from typing import Any

import oncelog
from oncelog.failures import Failure


def main() -> None:
    ledger_url, run_id, scenario, count_file, mode = sys.argv[1:6]
    failing = mode == "fail"
    ledger = oncelog.open(ledger_url)

    def performed(to: str) -> str:
        with open(count_file, "a", encoding="utf-8") as count:
            count.write(f"{run_id} {to}\n")
        return f"sent to {to}"

    def refused_connection(exc: BaseException) -> Failure | None:
        return Failure.NOT_PERFORMED if isinstance(exc, ConnectionRefusedError) else None

    def preflight(key: str, to: str) -> oncelog.PreflightAnswer:
        return (
            oncelog.Conflict("the provider holds another message") if failing else oncelog.NOT_FOUND
        )

    backoff = 3600.0 if scenario == "waiting" else 0.0
    declared: dict[str, dict[str, Any]] = {
        "retries": {"failures": refused_connection, "retry": oncelog.Retry(attempts=2, backoff=0)},
        "waiting": {"failures": refused_connection,
                    "retry": oncelog.Retry(attempts=3, backoff=backoff, cap=backoff, jitter=0)},
        "refused": {"refusals": (PermissionError,)},
        "conflict": {"preflight": preflight},
        "budget": {"cost": 2.0},
        "approval": {"kind": "destructive"},
        "denied": {"kind": "destructive"},
    }  # fmt: skip
    options = declared.get(scenario, {})
    options.setdefault("kind", "create")

    @ledger.tool(name="send", **options)
    def send(to: str, *, idempotency_key: str) -> str:
        if failing and scenario in ("retries", "waiting"):
            raise ConnectionRefusedError("the mail service refuses connections")
        if failing and scenario == "refused":
            raise PermissionError("the mail service refused: quota")
        if failing and scenario in ("unknown", "abandoned"):
            performed(to)
            raise ConnectionResetError("the connection dropped before the answer")
        return performed(to)

    def agent() -> None:
        budget = oncelog.Budget(cost=1.0) if scenario == "budget" else None
        with ledger.run(run_id, budget=budget) as run:
            run.effect(
                "send", send, "drifted@example.com" if mode == "drift" else "ada@example.com"
            )
            if failing and scenario == "drift":
                raise RuntimeError("the agent's code crashed after the send")

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
