"""An agent whose code swallows every stop and says it is done: it catches
``BaseException`` and calls ``sys.exit(0)`` (or returns), the attack on "a stop for a
person is recorded and announced when it happens". Its tools post to the provider process
(``support/provider.py``), which counts what it performed; the ledger's ``alert_webhook``
is WEBHOOK.

Usage: swallower.py LEDGER RUN_ID PROVIDER WEBHOOK SCENARIO CATCH [--bare] [--async]

Scenarios, one step each:
- ``ambiguous``: ``pay`` performs, then loses its answer (in doubt, no probe);
- ``approval``: ``wipe``, a destructive effect, waits for a person's approval;
- ``switch``: ``pay`` (the test turns the run's kill switch on first).

CATCH is where the code swallows the stop: ``exit_inside`` (``except BaseException:
sys.exit(0)`` inside the run's block), ``exit_outside`` (around the block), ``return``
(``except Exception: pass`` around the block, then the agent returns). It exits through
``oncelog.run_main`` unless ``--bare``; ``--async`` drives an ``AsyncRun``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.request
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
    for name in ("ledger", "run_id", "provider", "webhook"):
        parser.add_argument(name)
    parser.add_argument("scenario", choices=("ambiguous", "approval", "switch"))
    parser.add_argument("catch", choices=("exit_inside", "exit_outside", "return"))
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--async", dest="use_async", action="store_true")
    options = parser.parse_args()
    ledger = oncelog.open(options.ledger, alert_webhook=options.webhook)

    def tool(name: str, kind: str, lose_answer: bool = False) -> oncelog.Tool[..., Any]:
        def call(value: Any, *, idempotency_key: str) -> Any:
            answer = post(options.provider, options.run_id, name, value, idempotency_key)
            if lose_answer:
                raise ConnectionResetError("the connection dropped before the answer")
            return answer

        return ledger.tool(kind=kind, name=name)(call)  # type: ignore[arg-type]

    step = {
        "ambiguous": ("pay", tool("pay", "payment", lose_answer=True)),
        "approval": ("wipe", tool("wipe", "destructive")),
        "switch": ("pay", tool("pay", "payment")),
    }[options.scenario]
    inside = options.catch == "exit_inside"

    def swallowed() -> None:
        print("swallowed", flush=True)
        if options.catch != "return":
            sys.exit(0)

    def run_sync() -> None:
        with ledger.run(options.run_id) as run:
            try:
                run.effect(step[0], step[1], 500)
            except BaseException:
                if not inside:
                    raise
                swallowed()

    async def run_async() -> None:
        async with ledger.run(options.run_id) as run:
            try:
                await run.effect(step[0], step[1], 500)
            except BaseException:
                if not inside:
                    raise
                swallowed()

    def agent() -> None:
        try:
            asyncio.run(run_async()) if options.use_async else run_sync()
        except SystemExit:
            raise
        except BaseException:
            swallowed()

    if options.bare:
        agent()
    else:
        oncelog.run_main(agent)


if __name__ == "__main__":
    main()
