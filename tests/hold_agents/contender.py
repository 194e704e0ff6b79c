"""An agent that takes the hold on one resource again and again, acting on it twice
under each hold through ``fenced_resource`` with the hold's token; several of these,
on different runs, contend for it while the test SIGKILLs and restarts them.

    python contender.py LEDGER RUN_ID LOG --holds 6 --lease-ttl 1.0 [--wait 60]
        [--kind create --die-in-tool]

``--die-in-tool``: the process SIGKILLs itself in its first action, once the provider has
begun it, leaving that effect in doubt under the hold.

Exits through ``oncelog.run_main``: 0 completed, 75 the run was leased elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import fenced_resource  # type: ignore[import-not-found]  # beside this script

import oncelog

RESOURCE = ("host", "db-1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("run_id")
    parser.add_argument("log", type=Path)
    parser.add_argument("--holds", type=int, default=6)
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    parser.add_argument("--work", type=float, default=0.01)
    parser.add_argument("--wait", type=float, default=60.0)
    parser.add_argument("--kind", default="upsert")
    parser.add_argument("--die-in-tool", action="store_true")
    args = parser.parse_args(sys.argv[1:])
    ledger = oncelog.open(args.db, lease_ttl=args.lease_ttl)

    @ledger.tool(kind=args.kind, name="act")
    def act(turn: int, *, hold_token: int) -> int:
        fenced_resource.act(args.log, hold_token, args.work, die=args.die_in_tool)
        return hold_token

    def agent() -> None:
        with ledger.run(args.run_id) as run:
            for turn in range(args.holds):
                with run.hold(RESOURCE, wait=args.wait):
                    run.effect(f"first-{turn}", act, turn)
                    run.effect(f"second-{turn}", act, turn)

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
