"""An agent process for the race tests: wait at a barrier, then run two steps.

A read step ``prepare``, then an effect whose tool appends ``<pid> <key>`` to a marker
file (the provider's own record). The tool can tell the parent it is inside
(``--in-tool``), wait for the parent (``--hold``) or stop the process with SIGSTOP
(``--stop-in tool``); ``--stop-in read`` stops in ``prepare``, before the effect.
``--no-heartbeat`` breaks the renewal of its lease (the control of the heartbeat test). On
success the agent prints one JSON line ``{"pid", "result", "called"}``. It exits through
``oncelog.run_main``: 0 completed, 3 halted, 75 leased elsewhere or lease lost.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

import oncelog


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("run_id")
    parser.add_argument("--step", default="charge")
    parser.add_argument("--kind", default="create")
    parser.add_argument("--marker", required=True)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--ready", type=int, help="fd: write one byte once opened")
    parser.add_argument("--go", type=int, help="fd: start when it reaches end of file")
    parser.add_argument("--in-tool", type=int, help="fd: write our pid on entering the tool")
    parser.add_argument("--hold", type=int, help="fd: the tool returns at its end of file")
    parser.add_argument("--stop-in", choices=("tool", "read"))
    parser.add_argument("--retry-leased", type=float, default=0.0, help="seconds")
    parser.add_argument("--no-heartbeat", action="store_true")
    return parser.parse_args(argv)


def stop_self() -> str:
    os.kill(os.getpid(), signal.SIGSTOP)
    return "resumed"


def wait_for_end_of_file(fd: int) -> None:
    while os.read(fd, 1):
        pass
    os.close(fd)


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.called = False
        self.ledger = oncelog.open(args.db, lease_ttl=args.lease_ttl)
        self.tool = self.ledger.tool(kind=oncelog.Kind(args.kind), name="append_marker")(
            self.append_marker
        )

    def append_marker(self, note: str, *, idempotency_key: str) -> dict[str, Any]:
        self.called = True
        pid = os.getpid()
        with open(self.args.marker, "a") as marker:  # O_APPEND: one whole line per write
            marker.write(f"{pid} {idempotency_key}\n")
        if self.args.in_tool is not None:
            os.write(self.args.in_tool, f"{pid}\n".encode())
        if self.args.hold is not None:
            wait_for_end_of_file(self.args.hold)
        if self.args.stop_in == "tool":
            stop_self()
        return {"pid": pid, "note": note}

    def prepare(self) -> str:
        return stop_self() if self.args.stop_in == "read" else "prepared"

    def run_once(self) -> None:
        with self.ledger.run(self.args.run_id) as run:
            run.read("prepare", self.prepare)
            result = run.effect(self.args.step, self.tool, "hello")
        report = {"pid": os.getpid(), "result": result, "called": self.called}
        print(json.dumps(report), flush=True)

    def __call__(self) -> None:
        deadline = time.monotonic() + self.args.retry_leased
        while True:
            try:
                self.run_once()
                return
            except oncelog.RunLeased:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)  # the lease expires by the store's clock; nothing to wait on


def main() -> None:
    args = parse(sys.argv[1:])
    if args.no_heartbeat:
        from oncelog.process import _heartbeat

        _heartbeat.Heartbeats._renew = staticmethod(lambda beat: None)  # type: ignore[method-assign]
    agent = Agent(args)
    if args.ready is not None:
        os.write(args.ready, b"r")
        os.close(args.ready)
    if args.go is not None:
        wait_for_end_of_file(args.go)
    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
