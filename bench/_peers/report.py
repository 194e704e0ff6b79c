"""The Markdown of ``bench/peers.py``: every figure beside its ratio to the bare loop
measured in the same invocation, with the machine's load."""

from __future__ import annotations

import statistics
from pathlib import Path

from _blocks import write_block

from .agents import AGENTS, RAW, STEPS
from .timing import Results


def render(results: Results, header: list[str]) -> str:
    bare = "bare loop"
    warm = {n: results.median(results.warm_ms, n) for n in AGENTS}
    process = {n: results.median(results.process_s, n) * 1000 for n in results.process_s}
    restart = {n: results.median(results.restart_s, n) * 1000 for n in results.restart_s}
    lines = [
        *header,
        "| contender | ms per 20-step run (warm) | overhead per step, ms | of which CPU, ms "
        "| run / bare | whole process, ms | / bare | restart to last step, ms | / bare |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in AGENTS:
        overhead = "-" if name == bare else f"{results.step_overhead_ms(name):.3f}"
        cpu = "-" if name == bare else f"{results.step_cpu_ms(name):.3f}"
        lines.append(
            f"| {name} | {warm[name]:.2f} | {overhead} | {cpu} | {warm[name] / warm[bare]:.0f}x "
            f"| {cell(process, name)} | {cell(restart, name)} |"
        )
    ours = results.step_overhead_ms("oncelog")
    peers = {n: results.step_overhead_ms(n) for n in AGENTS if n not in (bare, "oncelog", RAW)}
    cheapest = min(peers, key=peers.__getitem__)
    lines += [
        "",
        f"oncelog's overhead per step is {ours:.3f} ms; the cheapest peer's ({cheapest}) "
        f"{peers[cheapest]:.3f} ms ({ours / peers[cheapest]:.2f}x). Each step of the "
        f"{STEPS}-step agent is recorded durably by every contender but the bare loop. "
        f"An fsync of 4 KiB took {statistics.median(results.fsync_ms):.3f} ms on this disk "
        f"(median; {min(results.fsync_ms):.3f}-{max(results.fsync_ms):.3f} ms from one "
        "repetition to the next): the overhead beyond the CPU is mostly waiting for it.",
        "",
        floor_line(results),
    ]
    return "\n".join(lines) + "\n"


def cell(ms: dict[str, float], name: str) -> str:
    """A whole-process or restart figure and its ratio to the bare loop's; "-" for a
    contender it does not apply to."""
    if name not in ms:
        return "- | -"
    return f"{ms[name]:.0f} | {ms[name] / ms['bare loop']:.1f}x"


def floor_line(results: Results) -> str:
    """oncelog's per-step overhead beside that of its own statements replayed raw: how much of a
    step is oncelog's Python, how much SQLite, the kernel and the disk."""
    ours, raw = results.step_overhead_ms("oncelog"), results.step_overhead_ms(RAW)
    ours_cpu, raw_cpu = results.step_cpu_ms("oncelog"), results.step_cpu_ms(RAW)
    return (
        f"oncelog's overhead per step is {ours / raw:.2f}x its own statements replayed raw "
        f"({raw:.3f} ms; CPU {ours_cpu / raw_cpu:.2f}x, of {raw_cpu:.3f} ms): the same SQL "
        f"and fsyncs on a plain `sqlite3` connection. The rest, {ours - raw:.3f} ms per step "
        f"(CPU {ours_cpu - raw_cpu:.3f} ms), is oncelog's Python around them."
    )


def write_doc(path: Path, block: str) -> None:
    write_block(path, "peers", block, "Peers")
