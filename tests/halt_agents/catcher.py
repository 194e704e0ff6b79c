"""An agent that catches every stop and goes on, as a framework that hands a tool's error
back to its model does (CrewAI): the attack on "a halt sticks". Each tool posts to the
provider process (``support/provider.py``), which counts what it performed.

Usage: catcher.py LEDGER RUN_ID PROVIDER SCENARIO [--amount N]

Scenarios, each a list of steps, every one wrapped in ``except NeedsPerson``:
- ``ambiguous``: ``pay`` performs, then loses its answer (in doubt, no probe); the model
  calls ``pay`` again if it raised (a new position: a new key); then ``notify``.
- ``drift``: ``pay(amount)`` at step "pay", then ``notify``; started again with another
  ``--amount`` the recorded payment drifts.
- ``budget``: a run budget of 5 (stop): ``pay`` costs 4, ``big`` 3 (refused), ``small``
  0.5; then ``notify``.
- ``switch``: ``pay`` then ``notify`` (the test turns the run's kill switch on first).

It prints ``caught KIND: MESSAGE`` for each stop it swallowed and exits through
``oncelog.run_main`` (0 completed, 3 a person must act).
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import oncelog


def post(provider: str, run_id: str, tool: str, payload: Any, key: str) -> Any:
    body = {"key": key, "run": run_id, "payload": {"tool": tool, "value": payload}}
    request = urllib.request.Request(
        provider + "/effect", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("provider")
    parser.add_argument("scenario", choices=("ambiguous", "drift", "budget", "switch"))
    parser.add_argument("--amount", type=int, default=10)
    options = parser.parse_args()
    ledger = oncelog.open(options.ledger)

    def tool(name: str, cost: float = 0.0, lose_answer: bool = False) -> oncelog.Tool[..., Any]:
        def call(value: Any, *, idempotency_key: str) -> Any:
            answer = post(options.provider, options.run_id, name, value, idempotency_key)
            if lose_answer:
                raise ConnectionResetError("the connection dropped before the answer")
            return answer

        return ledger.tool(kind="payment", name=name, cost=cost)(call)

    pay = tool("pay", 4.0, lose_answer=options.scenario == "ambiguous")
    big, small, notify = tool("big", 3.0), tool("small", 0.5), tool("notify")

    def caught(step: Callable[[], Any]) -> bool:
        try:
            step()
        except oncelog.NeedsPerson as stop:  # handed back to the model, which goes on
            print("caught", f"{type(stop).__name__}:", stop, flush=True)
            return True
        return False

    def agent() -> None:
        budget = oncelog.Budget(cost=5.0) if options.scenario == "budget" else None
        with ledger.run(options.run_id, budget=budget) as run:
            if options.scenario == "ambiguous":
                if caught(lambda: pay(options.amount)):
                    caught(lambda: pay(options.amount))  # the model calls the tool again
            elif options.scenario == "drift":
                caught(lambda: run.effect("pay", pay, options.amount))
            elif options.scenario == "budget":
                caught(lambda: pay(options.amount))
                caught(lambda: big(options.amount))
                caught(lambda: small(options.amount))
            else:
                caught(lambda: pay(options.amount))
            caught(lambda: notify("done"))
            print("finished", flush=True)  # the code reached the end of its run

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
