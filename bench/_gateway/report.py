"""The Markdown of ``bench/gateway.py``: medians over the interleaved repetitions, each
ratio taken within a repetition (gateway batch over the direct batch beside it), and the
block of docs/benchmarks.md between its markers replaced."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from .measure import Batch

START, END = "<!-- bench:gateway:start -->", "<!-- bench:gateway:end -->"
SECTION = "## The MCP gateway"


@dataclass(frozen=True)
class Pair:
    direct: Batch
    gateway: Batch


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _cpu_ms(batch: Batch, name: str) -> float:
    return batch.cpu_s.get(name, 0.0) * 1000 / batch.calls


def row(clients: int, pairs: list[Pair]) -> str:
    direct = _median([p.direct.per_s for p in pairs])
    gateway = _median([p.gateway.per_s for p in pairs])
    ratio = _median([p.gateway.per_s / p.direct.per_s for p in pairs])
    lat_d = _median([_median(p.direct.latencies_s) * 1000 for p in pairs])
    lat_g = _median([_median(p.gateway.latencies_s) * 1000 for p in pairs])
    added = _median(
        [(_median(p.gateway.latencies_s) - _median(p.direct.latencies_s)) * 1000 for p in pairs]
    )
    cpu_gw = _median([_cpu_ms(p.gateway, "gateway") for p in pairs])
    cpu_up_d = _median([_cpu_ms(p.direct, "upstream") for p in pairs])
    cpu_up_g = _median([_cpu_ms(p.gateway, "upstream") for p in pairs])
    cpu_cl_d = _median([_cpu_ms(p.direct, "client") for p in pairs])
    cpu_cl_g = _median([_cpu_ms(p.gateway, "client") for p in pairs])
    return (
        f"| {clients} | {direct:,.0f} | {gateway:,.0f} | {ratio:.2f} | {lat_d:.2f} | "
        f"{lat_g:.2f} | {added:.2f} | {cpu_gw:.2f} | {cpu_up_d:.2f} / {cpu_up_g:.2f} | "
        f"{cpu_cl_d:.2f} / {cpu_cl_g:.2f} |"
    )


HEADER = (
    "| clients at once | direct calls/s | through the gateway calls/s | ÷ direct | "
    "direct ms per call (median) | gateway ms per call (median) | added ms per call | "
    "gateway CPU ms per call | upstream CPU ms per call (direct / gateway) | "
    "client CPU ms per call (direct / gateway) |\n|---|---|---|---|---|---|---|---|---|---|"
)


def render(facts: str, rows: list[str]) -> str:
    return f"{START}\n{facts}\n\n{HEADER}\n" + "\n".join(rows) + f"\n{END}\n"


def write_doc(path: Path, block: str, prose: str) -> None:
    """Replace the block between the markers; the first time, append the section (the
    prose, then the block) at the very end of the file."""
    text = path.read_text()
    if START in text:
        head, rest = text.split(START, 1)
        text = head + block.rstrip("\n") + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{prose}\n\n{block}"
    path.write_text(text)
