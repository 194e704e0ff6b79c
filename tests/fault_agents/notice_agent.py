"""An agent process for the storage fault tests.

It runs one ``create`` effect per step. Each execution of the effect appends a line to a
marker file, so whether (and how often) an effect ran is observable from outside the
process, whatever happened to the ledger. How the run ended goes to a JSON report.

Faults are armed from inside the process through libfiu's own control API
(``fiu_rc_string``, the same command syntax as ``fiu-run -c``), at the exact point the
test names: just before a step's intent commit, or inside the tool right after the effect
(so the next commit is the outcome's). A ``onetime`` command fails exactly one call. The
process must run under ``fiu-run -x`` so the POSIX preload library wraps the syscalls.

After a failed commit the agent gives up (the default), dies at once
(``--die-on-store-error``), or retries the step once, as code that takes a store error
for a transient one would (``--retry-store-error``).

Usage: notice_agent.py LEDGER RUN_ID MARKERS REPORT --steps a,b,c
       [--fault CMD --fault-step STEP --fault-phase intent|outcome]
       [--die-on-store-error | --retry-store-error] [--crash-before STEP]
       [--pause-before STEP] [--positional | --async]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Literal

import oncelog

EXIT_NO_PRELOAD = 2


class Options(argparse.Namespace):
    ledger: str
    run_id: str
    markers: str
    report: str
    steps: str
    fault: str | None
    fault_step: str | None
    fault_phase: str
    durability: Literal["intent", "full", "process"]
    die_on_store_error: bool
    retry_store_error: bool
    crash_before: str | None
    pause_before: str | None
    positional: bool
    use_async: bool


def parse(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("markers")
    parser.add_argument("report")
    parser.add_argument("--steps", required=True)
    parser.add_argument("--fault", help="a libfiu control command, armed at --fault-step")
    parser.add_argument("--fault-step")
    parser.add_argument("--fault-phase", choices=("intent", "outcome"), default="intent")
    parser.add_argument("--durability", choices=("intent", "full", "process"), default="intent")
    parser.add_argument("--die-on-store-error", action="store_true")
    parser.add_argument("--retry-store-error", action="store_true")
    parser.add_argument("--crash-before", help="SIGKILL this process when reaching a step")
    parser.add_argument("--pause-before")
    parser.add_argument("--positional", action="store_true", help="call the tool directly")
    parser.add_argument("--async", dest="use_async", action="store_true")
    return parser.parse_args(argv, namespace=Options())


def arm(command: str) -> None:
    """Enable a libfiu failure point in this process, now."""
    with open("/proc/self/maps") as maps:
        if "fiu_posix_preload" not in maps.read():
            # Without the preload libfiu is not initialised and nothing would fail.
            print("fiu_posix_preload.so is not loaded: run under fiu-run -x", file=sys.stderr)
            sys.exit(EXIT_NO_PRELOAD)
    libfiu = ctypes.CDLL("libfiu.so.0")  # the instance the preload library already uses
    libfiu.fiu_rc_string.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
    error = ctypes.c_char_p()
    if libfiu.fiu_rc_string(command.encode(), ctypes.byref(error)) != 0:
        raise RuntimeError(f"libfiu refused {command!r}: {error.value!r}")


def pause(step: str) -> None:
    """Tell the test we reached ``step`` and wait until it has changed the world."""
    print(f"paused before {step}", flush=True)
    sys.stdin.readline()


def write_report(path: str, exc: BaseException | None, code: int) -> None:
    report: dict[str, Any] = {"exit_code": code, "error_type": None, "message": None}
    if exc is not None:
        message = exc.message if isinstance(exc, oncelog.OnceLogError) else str(exc)
        report.update(error_type=type(exc).__name__, message=message)
    Path(path).write_text(json.dumps(report))


class NoticeAgent:
    """The agent's code, shared by its sync and async forms."""

    def __init__(self, ledger: oncelog.Ledger, opts: Options) -> None:
        self.opts = opts
        self.steps = opts.steps.split(",")
        self.armed = False
        self.send_notice = ledger.tool(kind="create", name="send_notice")(self._send_notice)

    def _send_notice(self, step: str, *, idempotency_key: str) -> dict[str, str]:
        # The effect: one appended line per execution (write(2), no fsync, so it never
        # consumes a failure armed on the sync calls).
        with open(self.opts.markers, "a") as markers:
            markers.write(json.dumps({"step": step, "key": idempotency_key}) + "\n")
        self._arm_at(step, "outcome")
        return {"sent": step}

    def _arm_at(self, step: str, phase: str) -> None:
        """Arm the fault the first time the process reaches its step and phase."""
        opts = self.opts
        if opts.fault and not self.armed and (step, phase) == (opts.fault_step, opts.fault_phase):
            self.armed = True
            arm(opts.fault)

    def before(self, step: str) -> None:
        if step == self.opts.crash_before:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == self.opts.pause_before:
            pause(step)
        self._arm_at(step, "intent")

    def store_failed(self, exc: oncelog.StoreError) -> None:
        """After a failed commit: die, give up (re-raise), or return to retry the step."""
        if self.opts.die_on_store_error:
            # The pod dies right after the failed commit: no further commit, no close, no
            # checkpoint; whatever SQLite left in the WAL is what recovery will see.
            write_report(self.opts.report, exc, -signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        if not self.opts.retry_store_error:
            raise exc

    def call(self, run: oncelog.Run, step: str) -> None:
        if self.opts.positional:
            self.send_notice(step)  # inside a run: an effect with step id "send_notice@<n>"
        else:
            run.effect(step, self.send_notice, step)

    def run(self, ledger: oncelog.Ledger) -> None:
        with ledger.run(self.opts.run_id, plan=self.steps) as run:
            for step in self.steps:
                self.before(step)
                try:
                    self.call(run, step)
                except oncelog.StoreError as exc:
                    self.store_failed(exc)
                    self.call(run, step)

    async def run_async(self, ledger: oncelog.Ledger) -> None:
        async with ledger.run(self.opts.run_id, plan=self.steps) as run:
            for step in self.steps:
                self.before(step)
                try:
                    await run.effect(step, self.send_notice, step)
                except oncelog.StoreError as exc:
                    self.store_failed(exc)
                    await run.effect(step, self.send_notice, step)


def main(argv: list[str]) -> int:
    opts = parse(argv)
    try:
        with oncelog.open(opts.ledger, durability=opts.durability) as ledger:
            agent = NoticeAgent(ledger, opts)
            if opts.use_async:
                asyncio.run(agent.run_async(ledger))
            else:
                agent.run(ledger)
    except oncelog.OnceLogError as exc:
        code = oncelog.exit_code_for(exc)
        write_report(opts.report, exc, code)
        print(f"oncelog: {type(exc).__name__}: {exc}", file=sys.stderr)
        return code
    write_report(opts.report, None, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
