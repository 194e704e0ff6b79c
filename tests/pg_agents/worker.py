"""An agent for the PostgreSQL fault tests: runs several runs, one after another, each a
few effects posted to the provider process with their idempotency keys.

    python tests/pg_agents/worker.py URL --provider P --runs r1,r2 [--effects 3]
        [--lease-ttl S] [--stop-after effect-2] [--retry-leased S] [--store-timeout S]

A run that needs a person (an effect in doubt) is reported and the next run goes on; a
run that cannot go on here (``StoreUnavailable``, ``RunLeased``, ``LeaseLost``) ends the
process with exit code 75, as a supervisor expects, to be started again. ``--stop-after
STEP`` stops the process with SIGSTOP once the provider has answered STEP, before the
outcome is recorded. On the way out it prints ``{run: "completed" | error name}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import urllib.request
from typing import Any

import oncelog


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--provider", required=True)
    parser.add_argument("--runs", required=True, help="comma-separated run ids")
    parser.add_argument("--effects", type=int, default=3)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--stop-after", metavar="STEP_ID")
    parser.add_argument("--retry-leased", type=float, default=0.0, help="seconds")
    parser.add_argument("--store-timeout", type=float, help="seconds")
    return parser.parse_args()


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ledger = oncelog.open(
            args.url, lease_ttl=args.lease_ttl, store_timeout=args.store_timeout
        )
        self.post = self.ledger.tool(kind="create", name="provider.create")(self._post)
        self.outcomes: dict[str, str] = {}

    def _post(self, run_id: str, step: str, *, idempotency_key: str) -> Any:
        body = {"key": idempotency_key, "run": run_id, "payload": {"step": step},
                "ledger": self.args.url}  # fmt: skip
        request = urllib.request.Request(
            self.args.provider + "/effect", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        if step == self.args.stop_after:
            os.kill(os.getpid(), signal.SIGSTOP)
        return answer

    def run(self, run_id: str) -> None:
        deadline = time.monotonic() + self.args.retry_leased
        while True:
            try:
                with self.ledger.run(run_id) as run:
                    for n in range(1, self.args.effects + 1):
                        run.effect(f"effect-{n}", self.post, run_id, f"effect-{n}")
                return
            except oncelog.RunLeased:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)  # the lease expires by the server's clock

    def __call__(self) -> None:
        try:
            for run_id in self.args.runs.split(","):
                try:
                    self.run(run_id)
                    self.outcomes[run_id] = "completed"
                except oncelog.NeedsPerson as exc:
                    self.outcomes[run_id] = type(exc).__name__
        finally:
            print(json.dumps(self.outcomes), flush=True)


if __name__ == "__main__":
    oncelog.run_main(Worker(parse()))
