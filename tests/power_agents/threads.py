"""Many runs in one process, one thread each, for the group commit's power-loss test.

    python tests/power_agents/threads.py --ledger L --provider FILE --runs N --effects E

Runs ``run-1`` .. ``run-N`` at once on one ledger, each of E effects ``effect-1`` ..
``effect-E``, in rounds: every run makes its effect N before any makes N+1, so the
intents of one round are committed at once however the machine schedules the threads
(one thread let run ahead alone would share no fsync). The provider is a file outside
the ledger holding every call's idempotency key, one line per call, synced before the
tool returns: a power loss of the ledger's machine does not touch it.
``ONCELOG_CRASH_AT`` kills the process at a named crash point, the first thread to reach
it ending all of them.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

import oncelog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--effects", type=int, required=True)
    args = parser.parse_args()
    provider, written = Path(args.provider), threading.Lock()
    rounds = threading.Barrier(args.runs)

    with oncelog.open(args.ledger) as ledger:

        @ledger.tool(kind="create")
        def deliver(n: int, *, idempotency_key: str) -> int:
            with written, provider.open("a") as f:
                f.write(idempotency_key + "\n")
                f.flush()
                os.fsync(f.fileno())
            return n

        def one_run(run_id: str) -> None:
            with ledger.run(run_id) as run:
                for n in range(1, args.effects + 1):
                    rounds.wait()
                    run.effect(f"effect-{n}", deliver, n)

        threads = [
            threading.Thread(target=one_run, args=(f"run-{i}",)) for i in range(1, args.runs + 1)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


if __name__ == "__main__":
    main()
