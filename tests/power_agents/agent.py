"""An agent that the power-loss tests run under the fsync-recording shim and kill.

    python tests/power_agents/agent.py --ledger L --provider FILE --durability MODE
        [--effects N] [--kind create|upsert] [--probe]

One run (``power``): a model call, then N effects ``effect-1`` .. ``effect-N`` of one
kind. The provider is a file outside the ledger that remembers every call by its
idempotency key, one line per call, synced before the tool returns: a power loss of the
ledger's machine does not touch it. ``--probe`` gives the tool a probe that looks the
key up in that file. ``ONCELOG_CRASH_AT`` kills the agent at a named crash point.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import oncelog


def calls(provider: Path) -> list[str]:
    """Every key the provider was called with, once per call, in order."""
    return provider.read_text().split() if provider.exists() else []


def agent(args: argparse.Namespace) -> None:
    provider = Path(args.provider)

    def look_up(key: str, n: int) -> oncelog.ProbeAnswer:
        return oncelog.Found({"n": n}) if key in calls(provider) else oncelog.NOT_FOUND

    with oncelog.open(args.ledger, durability=args.durability) as ledger:

        @ledger.tool(kind=args.kind, probe=look_up if args.probe else None)
        def deliver(n: int, *, idempotency_key: str) -> dict[str, Any]:
            with provider.open("a") as f:
                f.write(idempotency_key + "\n")
                f.flush()
                os.fsync(f.fileno())
            return {"n": n}

        with ledger.run("power") as run:
            run.llm("think", lambda: {"plan": "deliver"})
            results = [run.effect(f"effect-{n}", deliver, n) for n in range(1, args.effects + 1)]
    print(json.dumps(results), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--durability", choices=("intent", "full", "process"), required=True)
    parser.add_argument("--effects", type=int, default=3)
    parser.add_argument("--kind", choices=("create", "upsert"), default="create")
    parser.add_argument("--probe", action="store_true")
    args = parser.parse_args()
    oncelog.run_main(lambda: agent(args))


if __name__ == "__main__":
    main()
