"""What ``oncelog gateway`` adds to an MCP tool call, measured against calling the same
upstream directly, in the same run.

    python bench/gateway.py [--quick] [--write docs/benchmarks.md] [--dir DIR] [--postgres URL]

The same client (the ``mcp`` package, protocol 2026-07-28, Streamable HTTP), the same tool
(``send_email`` of ``bench/_gateway/upstream.py``, which only answers) and the same
payload, once straight to the upstream and once through the gateway (which records each
call as an effect of kind ``create`` in its ledger: a SQLite file in ``--dir``, or a
schema of its own on the ``--postgres`` server), with 1 and with 100 clients at once, each
client's calls in runs of 10 (an agent's task; 100 in the last row, a long run, whose
calls should cost what a short one's do). Batches of the two alternate, repeated, so
that a noisy machine's drift hits both alike; the figures are medians over repetitions,
each ratio taken within one repetition. Every call is a new step (its own call id), so
nothing is answered from the ledger. CPU is read from ``/proc`` for each process beside
the wall time: the client (this process), the upstream, the gateway. Nothing here is a
timed assertion; the results go in docs/benchmarks.md ("The MCP gateway") with
``--write``. Parts in ``bench/_gateway/``.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _gateway import processes
from _gateway.measure import batch
from _gateway.report import Pair, render, row, write_doc
from _workers import postgres

PROSE = (
    "`python bench/gateway.py --write docs/benchmarks.md` measures what a tool call through\n"
    "`oncelog gateway` costs against the same call straight to the upstream MCP server: the\n"
    "same Python `mcp` client (protocol 2026-07-28, Streamable HTTP), the same tool (one that\n"
    "only answers, so the tool's own work hides nothing) and the same payload, with 1 and\n"
    "with 100 clients at once, batches of the two alternating in one run. Through the\n"
    "gateway each call is a new effect (kind `create`, its own call id): its intent and its\n"
    "outcome are committed to the ledger around the upstream call, under its run's lease,\n"
    "and the call crosses one more HTTP hop. Each client's calls go to runs of 10 (an\n"
    "agent's task); the last row puts 100 in a run, to show whether a call costs more\n"
    "the more the run already holds.\n"
    "*÷ direct* is calls/s through the gateway over calls/s direct, within one repetition;\n"
    "*added ms per call* the median latency through the gateway less the median direct,\n"
    "within one repetition. CPU is each process's own, from `/proc`."
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a few calls (seconds)")
    parser.add_argument("--write", type=Path, help="update this benchmark's block of this file")
    parser.add_argument("--dir", type=Path, help="where the SQLite ledger goes (default /var/tmp)")
    parser.add_argument(
        "--postgres", metavar="URL", help="a PostgreSQL ledger instead, in a schema of its own"
    )
    parser.add_argument(
        "--cases", nargs="+", default=["1x10", "100x10", "1x100"], metavar="CLIENTSxPER_RUN",
        help="clients at once x calls per run (an agent's task), each a row",
    )  # fmt: skip
    parser.add_argument("--reps", type=int, help="repetitions (default 5; --quick 1)")
    parser.add_argument("--calls", type=int, help="calls per client (default 200 / clients)")
    return parser.parse_args(argv)


def calls_per_client(args: argparse.Namespace, clients: int, per_run: int) -> int:
    if args.calls:
        return int(args.calls)
    total = 20 if args.quick else max(200, 2 * per_run)
    return max(2 if args.quick else 10, total // clients)


def measure(args: argparse.Namespace, folder: Path, ledger: str) -> tuple[list[str], float]:
    reps = args.reps or (1 if args.quick else 5)
    argv, port = processes.upstream()
    started = time.time()
    with processes.started(argv, port, "the upstream") as up:
        direct_url = f"http://127.0.0.1:{port}/mcp"
        config = processes.gateway_config(folder, direct_url)
        argv, gw_port = processes.gateway(config, ledger)
        env = {processes.TOKEN_ENV: processes.TOKEN, "ONCELOG_LINK_SECRET": processes.LINK_SECRET}
        with processes.started(argv, gw_port, "the gateway", **env) as gw:
            cpu = {
                "client": time.process_time,
                "upstream": lambda: processes.cpu_seconds(up.pid),
                "gateway": lambda: processes.cpu_seconds(gw.pid),
            }
            gateway_url = f"http://127.0.0.1:{gw_port}/mcp"
            rows = []
            for case in args.cases:
                clients, per_run = (int(part) for part in case.split("x"))
                calls = calls_per_client(args, clients, per_run)
                pairs = []
                for rep in range(reps):
                    # Alternate which goes first, so neither always meets a warmer machine.
                    order = ("direct", "gateway") if rep % 2 == 0 else ("gateway", "direct")
                    done = {}
                    for target in order:
                        url, token = (
                            (direct_url, None)
                            if target == "direct"
                            else (gateway_url, processes.TOKEN)
                        )
                        done[target] = batch(url, token, clients, calls, per_run, cpu)
                    pairs.append(Pair(done["direct"], done["gateway"]))
                rows.append(row(clients, per_run, pairs))
                print(rows[-1], flush=True)
    return rows, time.time() - started


def ledger_kind(args: argparse.Namespace) -> str:
    return "postgres" if args.postgres else "sqlite"


@contextmanager
def ledger_url(args: argparse.Namespace, folder: Path) -> Iterator[str]:
    """A SQLite file in ``folder``, or a fresh schema on ``--postgres`` (dropped after)."""
    if not args.postgres:
        yield str(folder / "ledger.db")
        return
    schema = f"oncelog_bench_gateway_{secrets.token_hex(4)}"
    with postgres.connect(args.postgres) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield postgres.schema_url(args.postgres, schema)
    finally:
        with postgres.connect(args.postgres) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def flags(args: argparse.Namespace) -> str:
    """The options that shaped the numbers, as the command line gave them."""
    given = [" --quick"] if args.quick else []
    given += [f" --postgres {args.postgres}"] if args.postgres else []
    return "".join(given)


def facts(args: argparse.Namespace, seconds: float, load: tuple[float, float]) -> str:
    ledger = {"postgres": "PostgreSQL (on this machine)", "sqlite": "SQLite (a file on disk)"}[
        ledger_kind(args)
    ]
    cpu = os.cpu_count()
    return (
        f"Generated by `python bench/gateway.py{flags(args)}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in {seconds:.0f} s: {cpu} CPUs, "
        f"Python {platform.python_version()}, ledger {ledger}, load average at start / end "
        f"{load[0]:.2f} / {load[1]:.2f} (the machine is shared: the load is other work). "
        f"Repetitions: {args.reps or (1 if args.quick else 5)}, each a batch direct and a "
        "batch through the gateway."
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.dir or Path("/var/tmp")
    folder = Path(tempfile.mkdtemp(prefix="oncelog-bench-gateway-", dir=root))
    try:
        load_start = os.getloadavg()[0]
        with ledger_url(args, folder) as ledger:
            rows, seconds = measure(args, folder, ledger)
        kind = ledger_kind(args)
        block = render(kind, facts(args, seconds, (load_start, os.getloadavg()[0])), rows)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(block)
    if args.write:
        write_doc(args.write, ledger_kind(args), block, PROSE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
