"""An agent for the sink tests: one run of ``count`` effects, each recorded in the ledger
(and, with ``$ONCELOG_SIGNING_KEY``, a signed checkpoint at the run's end).

Usage: clerk.py LEDGER RUN_ID COUNT
"""

from __future__ import annotations

import sys

import oncelog


def main() -> None:
    ledger_url, run_id, count = sys.argv[1:4]
    ledger = oncelog.open(ledger_url)

    @ledger.tool(kind="create", name="file_note")
    def file_note(n: int, *, idempotency_key: str) -> dict[str, int]:
        return {"note": n}

    def agent() -> None:
        with ledger.run(run_id) as run:
            for n in range(int(count)):
                run.effect(f"note-{n}", file_note, n)

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
