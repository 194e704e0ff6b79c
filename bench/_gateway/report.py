"""The Markdown of ``bench/gateway.py``: medians over the interleaved repetitions, each
ratio taken within a repetition (gateway batch over the direct batch beside it), and the
block of docs/benchmarks.md between its markers replaced."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from .measure import Batch

SECTION = "## The MCP gateway"


def markers(ledger: str) -> tuple[str, str]:
    """The block of one ledger kind (``sqlite``, ``postgres``): each run replaces its own."""
    return f"<!-- bench:gateway:{ledger}:start -->", f"<!-- bench:gateway:{ledger}:end -->"


@dataclass(frozen=True)
class Pair:
    direct: Batch
    gateway: Batch


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _cpu_ms(batch: Batch, name: str) -> float:
    return batch.cpu_s.get(name, 0.0) * 1000 / batch.calls


def row(clients: int, per_run: int, pairs: list[Pair]) -> str:
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
        f"| {clients} | {per_run} | {direct:,.0f} | {gateway:,.0f} | {ratio:.2f} | {lat_d:.2f} | "
        f"{lat_g:.2f} | {added:.2f} | {cpu_gw:.2f} | {cpu_up_d:.2f} / {cpu_up_g:.2f} | "
        f"{cpu_cl_d:.2f} / {cpu_cl_g:.2f} |"
    )


HEADER = (
    "| clients at once | calls per run | direct calls/s | through the gateway calls/s | ÷ direct | "
    "direct ms per call (median) | gateway ms per call (median) | added ms per call | "
    "gateway CPU ms per call | upstream CPU ms per call (direct / gateway) | "
    "client CPU ms per call (direct / gateway) |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def render(ledger: str, facts: str, rows: list[str]) -> str:
    start, end = markers(ledger)
    return f"{start}\n{facts}\n\n{HEADER}\n" + "\n".join(rows) + f"\n{end}\n"


def write_doc(path: Path, ledger: str, block: str, prose: str) -> None:
    """Replace this ledger's block between its markers; else add it at the end of the
    section, which is the last of the file (made, with its prose, the first time)."""
    start, end = markers(ledger)
    text = path.read_text()
    if start in text:
        head, rest = text.split(start, 1)
        text = head + block.rstrip("\n") + rest.split(end, 1)[1]
    elif SECTION in text:
        text = text.rstrip("\n") + f"\n\n{block}"
    else:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{prose}\n\n{block}"
    path.write_text(text)
