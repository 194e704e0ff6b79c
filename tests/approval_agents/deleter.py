"""An agent with one destructive step, for the approval tests.

Usage: deleter.py LEDGER RUN_ID MARKERS ACCOUNT. Appends ``key account`` to MARKERS when
the deletion really runs; prints ``denied: ...`` and completes if a person denied it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import oncelog


def main() -> None:
    ledger_path, run_id, markers, account = sys.argv[1:5]
    ledger = oncelog.open(ledger_path)

    @ledger.tool(kind="destructive", name="delete_account")
    def delete_account(account: str, *, idempotency_key: str) -> dict[str, str]:
        with Path(markers).open("a") as out:
            out.write(f"{idempotency_key} {account}\n")
        return {"deleted": account}

    def agent() -> None:
        with ledger.run(run_id) as run:
            run.read("lookup", lambda: {"account": account})
            try:
                print(run.effect("delete", delete_account, account))
            except oncelog.ApprovalDenied as denied:
                print(f"denied: {denied.message}")

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
