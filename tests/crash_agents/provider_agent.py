"""An agent whose one payment tool is declared with ``provider=`` and nothing else, for
the crash tests to kill (``ONCELOG_CRASH_AT``): what it does with a payment in doubt comes
from the provider's declaration alone.

    python tests/crash_agents/provider_agent.py LEDGER RUN PROVIDER_URL PROVIDER_NAME

``PROVIDER_NAME`` is one of ``oncelog.providers`` (``adyen``, ``paypal``, ...). The tool
posts to ``support/provider.py``'s ``/effect`` with the step's idempotency key. It prints
the result as one JSON line and exits through ``oncelog.run_main``.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

import oncelog
from oncelog import providers


def agent(ledger_url: str, run_id: str, url: str, provider: providers.Provider) -> None:
    @oncelog.tool(kind="payment", name="pay", provider=provider)
    def pay(cents: int, *, idempotency_key: str) -> dict[str, Any]:
        body = {"key": idempotency_key, "run": run_id, "payload": {"cents": cents}}
        request = urllib.request.Request(
            f"{url}/effect", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            result: dict[str, Any] = json.loads(answer.read())
        return result

    with oncelog.open(ledger_url) as ledger, ledger.run(run_id) as run:
        result = run.effect("pay", pay, 500)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    ledger_url, run_id, url, name = sys.argv[1:5]
    chosen = getattr(providers, name)
    oncelog.run_main(lambda: agent(ledger_url, run_id, url, chosen))
