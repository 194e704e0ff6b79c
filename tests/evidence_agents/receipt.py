"""An agent with one payment whose tool declares the shape of its result, for the tests of
the journal as evidence.

Usage: receipt.py LEDGER RUN_ID CHARGES. The tool appends its idempotency key to CHARGES
(the provider's own record of every charge it performed) and returns a receipt; the agent
prints the receipt as one JSON line and exits through ``oncelog.run_main``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import oncelog

RECEIPT = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "cents": {"type": "integer"}},
    "required": ["id", "cents"],
    "additionalProperties": False,
}


def main() -> None:
    ledger_path, run_id, charges = sys.argv[1:4]
    ledger = oncelog.open(ledger_path)

    @ledger.tool(kind="payment", name="charge", result_schema=RECEIPT)
    def charge(cents: int, *, idempotency_key: str) -> dict[str, object]:
        with Path(charges).open("a") as out:
            out.write(f"{idempotency_key}\n")
        return {"id": f"ch_{idempotency_key[:8]}", "cents": cents}

    def agent() -> None:
        with ledger.run(run_id) as run:
            print(json.dumps(run.effect("charge", charge, 500)))

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
