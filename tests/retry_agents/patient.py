"""An agent that waits in place (``run_main(wait_for_person=...)``) when its one send is
refused until its retry policy runs out (``test_retry_waiting.py``): the mail service
refuses connections while the file DOWN exists, and the sends it performs are appended to
COUNT, outside the ledger.

Usage: patient.py LEDGER RUN_ID COUNT DOWN [WAIT [BACKOFF]]
(WAIT: seconds, 60 by default; BACKOFF: seconds between five attempts, else two at once)
"""

from __future__ import annotations

import os
import sys

import oncelog
from oncelog.failures import Failure


def main() -> None:
    ledger_url, run_id, count_file, down = sys.argv[1:5]
    wait = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    backoff = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    ledger = oncelog.open(ledger_url)

    def refused_connection(exc: BaseException) -> Failure | None:
        return Failure.NOT_PERFORMED if isinstance(exc, ConnectionRefusedError) else None

    @ledger.tool(
        name="send", kind="create", failures=refused_connection,
        retry=oncelog.Retry(attempts=5 if backoff else 2, backoff=backoff, cap=backoff, jitter=0),
    )  # fmt: skip
    def send(to: str, *, idempotency_key: str) -> str:
        if os.path.exists(down):
            raise ConnectionRefusedError("the mail service refuses connections")
        with open(count_file, "a", encoding="utf-8") as count:
            count.write(f"{run_id} {idempotency_key}\n")
        return f"sent to {to}"

    def agent() -> None:
        with ledger.run(run_id) as run:
            run.effect("send", send, "ada@example.com")

    oncelog.run_main(agent, wait_for_person=wait)


if __name__ == "__main__":
    main()
