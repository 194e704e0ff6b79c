"""An agent whose one tool sends a message to a provider declared ``providers.nylas``, for
the tests of a key the provider holds for other parameters: a later start, in a process of
its own, decides the halted step from what the first one recorded.

    python tests/crash_agents/key_agent.py LEDGER RUN PROVIDER_URL

The tool posts to ``PROVIDER_URL`` (``support/key_provider.py``) with the step's key in
``Idempotency-Key``. It prints the result as one JSON line and exits through
``oncelog.run_main``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx

import oncelog
from oncelog import providers


def agent(ledger_url: str, run_id: str, url: str) -> None:
    @oncelog.tool(kind="create", name="send", provider=providers.nylas)
    def send(*, idempotency_key: str) -> dict[str, Any]:
        answer = httpx.post(url, json={}, headers={"Idempotency-Key": idempotency_key})
        answer.raise_for_status()
        result: dict[str, Any] = answer.json()
        return result

    with oncelog.open(ledger_url) as ledger, ledger.run(run_id) as run:
        result = run.effect("send", send)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    ledger_url, run_id, url = sys.argv[1:4]
    oncelog.run_main(lambda: agent(ledger_url, run_id, url))
