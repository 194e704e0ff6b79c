"""The report's measurement sections (per-effect overhead, where its time goes, resume,
memory) and the small formatters they share."""

from __future__ import annotations

import statistics
from typing import Any

from .breakdown import COMMIT_LABEL, WAL_EFFECTS, WAL_WARM, Breakdown
from .effects import EffectResults
from .memory import MemoryResult
from .profiling import ProfileRow
from .settings import FLAT_FACTOR, FLAT_RSS_KIB, Settings
from .suite import Report

# Rows of the per-effect table, in order.
VARIANT_NAMES = {
    "bare": "bare call: the tool function alone",
    "floor_intent": "floor of `intent`: INSERT committed and fsynced, UPDATE committed",
    "guarded_intent": "guarded `run.effect`, durability `intent` (default)",
    "floor_full": "floor, `synchronous=FULL`: 2 committed txns (INSERT, UPDATE)",
    "guarded_full": "guarded `run.effect`, durability `full`",
    "floor_normal": "floor, `synchronous=NORMAL`",
    "guarded_process": "guarded `run.effect`, durability `process`",
}
RATIO_NAMES = {
    "intent_vs_floor": "guarded intent / floor of intent (1 fsynced + 1 unsynced commit)",
    "full_vs_floor": "guarded full / floor FULL",
    "process_vs_floor": "guarded process / floor NORMAL",
}


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def mib(n: int | None) -> float:
    return (n or 0) / (1 << 20)


def rss_growth_kib(child: dict[str, Any]) -> int:
    return int(child["hwm_after_kib"]) - int(child["rss_before_kib"])


def rss_text(child: dict[str, Any]) -> str:
    return f"{child['rss_before_kib'] / 1024:.1f} -> {child['hwm_after_kib'] / 1024:.1f}"


def spread(values: list[float]) -> str:
    """Median, then (min - max)."""
    return f"{statistics.median(values):.2f}x ({min(values):.2f} - {max(values):.2f})"


def flatness(memory: list[MemoryResult]) -> tuple[bool, str]:
    small, large = memory[0], memory[-1]
    peak_small = small.replay["tracemalloc_peak"]
    peak_large = large.replay["tracemalloc_peak"]
    rss_small = rss_growth_kib(small.replay_rss)
    rss_large = rss_growth_kib(large.replay_rss)
    factor = peak_large / peak_small
    text = (
        f"replay peak {mib(peak_small):.2f} MiB at {small.steps:,} steps, "
        f"{mib(peak_large):.2f} MiB at {large.steps:,} ({factor:.2f}x); RSS growth "
        f"{rss_small / 1024:.1f} -> {rss_large / 1024:.1f} MiB"
    )
    return factor <= FLAT_FACTOR and rss_large - rss_small <= FLAT_RSS_KIB, text


def profile_table(rows: list[ProfileRow]) -> str:
    lines = ["| function | calls | own us | cumulative us |", "|---|---:|---:|---:|"]
    lines += [
        f"| `{r.function}` | {r.calls_per_step:g} | {r.tottime_us:.1f} | {r.cumtime_us:.1f} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def effects_section(s: Settings, effects: EffectResults) -> list[str]:
    out = [
        "### 1. Per-effect overhead\n",
        f"{s.reps} repetitions; in each, a batch of {s.batch} effects per variant, the "
        "variants alternating in a rotating order (a first, discarded repetition warms up). "
        "Each cell is the median over the repetitions of that batch's statistic, in "
        "microseconds per effect.\n",
        "| variant | mean us | p50 us | p99 us |\n|---|---:|---:|---:|",
    ]
    for name, label in VARIANT_NAMES.items():
        d = effects.dists[name]
        out.append(f"| {label} | {d.mean:.1f} | {d.p50:.1f} | {d.p99:.1f} |")
    out += ["", "| ratio (median over repetitions, min - max) | mean | p50 |\n|---|---:|---:|"]
    for key, label in RATIO_NAMES.items():
        out.append(
            f"| {label} | {spread(effects.ratios[key])} | {spread(effects.ratios[key + '_p50'])} |"
        )
    dist = effects.dists
    extra_intent = dist["guarded_intent"].mean - dist["floor_intent"].mean
    extra_full = dist["guarded_full"].mean - dist["floor_full"].mean
    extra_process = dist["guarded_process"].mean - dist["floor_normal"].mean
    out += [
        "",
        f"Above the floor, a guarded effect costs {extra_intent:.0f} us (durability intent), "
        f"{extra_full:.0f} us (full) and {extra_process:.0f} us (process); the bare call "
        f"costs {dist['bare'].mean:.2f} us.\n",
    ]
    return out


def breakdown_section(effects: EffectResults) -> list[str]:
    b = effects.breakdown
    out = [
        "#### Where the time of a guarded effect goes (durability full)\n",
        "Each SQL statement timed through wrappers around the store's connection and the "
        f"cursor it keeps, {b.effects} effects after as many warm-up ones, guarded and floor "
        "alternating; the rest is Python. The wrapper itself adds about 1 us per statement "
        f"(counted in the Python rows). Total: guarded {b.guarded_total_us:.0f} us per "
        f"effect, floor {b.floor_total_us:.0f} us.\n",
        "| path | part | us per effect | statements per effect |\n|---|---|---:|---:|",
    ]
    for who, total, parts in (
        ("guarded", b.guarded_total_us, b.guarded),
        ("floor", b.floor_total_us, b.floor),
    ):
        for label, (us, count) in parts.items():
            out.append(f"| {who} | {label} | {us:.1f} | {count:g} |")
        python = total - sum(us for us, _ in parts.values())
        out.append(f"| {who} | Python around the statements (and the tool) | {python:.1f} | |")
    return [*out, "", *cost_notes(effects)]


def above_floor(b: Breakdown) -> str:
    """Split what a guarded effect costs above the floor into commits, statements, Python."""

    def parts(rows: dict[str, tuple[float, float]], total: float) -> tuple[float, float, float]:
        commits = rows.get(COMMIT_LABEL, (0.0, 0.0))[0]
        statements = sum(us for label, (us, _) in rows.items() if label != COMMIT_LABEL)
        return commits, statements, total - commits - statements

    g = parts(b.guarded, b.guarded_total_us)
    f = parts(b.floor, b.floor_total_us)
    return (
        f"Of the {b.guarded_total_us - b.floor_total_us:.0f} us a guarded effect costs above "
        f"the floor here: COMMITs {g[0] - f[0]:+.0f} us (more pages per commit, more "
        f"checkpoints), the other statements {g[1] - f[1]:+.0f} us, Python "
        f"{g[2] - f[2]:+.0f} us."
    )


def cost_notes(effects: EffectResults) -> list[str]:
    """Below the statement table: the split above the floor, WAL pages, the profile."""
    wal = effects.wal_pages
    by_btree = sorted(
        ((name.removeprefix("btree:"), n) for name, n in wal.items() if name.startswith("btree:")),
        key=lambda item: -item[1],
    )
    return [
        above_floor(effects.breakdown) + "\n",
        f"WAL pages appended per effect ({wal['page_size']:.0f}-byte pages, autocheckpoint "
        f"off, {WAL_EFFECTS} effects): guarded {wal['guarded']:.1f}, floor {wal['floor']:.1f} "
        f"in a new ledger; guarded {wal['guarded_warm']:.1f}, floor {wal['floor_warm']:.1f} "
        f"in one that holds {WAL_WARM:,} effects already, where the guarded pages belong to "
        "these b-trees: "
        + ", ".join(f"`{name}` {n:.2f}" for name, n in by_btree)
        + ". Every page is written to the WAL before the fsync and later copied into the "
        "database by a checkpoint, which is also fsynced under `synchronous=FULL`.\n",
        f"cProfile of {effects.breakdown.effects} guarded effects (durability full), top "
        "functions by own time, per effect (cProfile inflates Python calls; read the shares, "
        "not the sums):\n",
        profile_table(effects.profile),
    ]


def resume_section(report: Report) -> list[str]:
    out = [
        "### 2. Resume\n",
        "A recorded, completed run is entered again and every step is asked for again; the "
        "tool is never called (checked). *enter* is `ledger.run(...).__enter__` (takes the "
        "lease: one durable commit), *replay* the steps, *exit* records the run's end (one "
        "durable commit). Ledger open excluded unless stated. Baselines on the same file, "
        "same run: a raw `SELECT * FROM steps WHERE run_id = ? ORDER BY seq` (fetchall), and "
        "the floor of a durable resume: that SELECT between two committed UPDATEs "
        "(`synchronous=FULL`). Medians.\n",
        "| steps | reps | enter ms | replay ms | exit ms | **total ms** | us/step (replay) "
        "| with `oncelog.open` + close ms | raw SELECT ms | SELECT + 2 commits ms "
        "| total / SELECT | total / floor |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {r.steps:,} | {r.reps} | {r.enter_ms:.2f} | {r.replay_ms:.2f} | {r.exit_ms:.2f} "
        f"| **{r.total_ms:.2f}** | {r.us_per_step:.1f} | {r.with_open_ms:.2f} "
        f"({r.open_reps} reps) | {r.select_ms:.3f} | {r.floor_ms:.3f} "
        f"| {r.total_ms / r.select_ms:.0f}x | {r.total_ms / r.floor_ms:.1f}x |"
        for r in report.resume
    ]
    return [
        *out,
        "",
        "cProfile of one replay of the 10,000-step run, top functions by own time, per step:\n",
        profile_table(report.replay_profile),
    ]


def memory_section(report: Report) -> list[str]:
    how = (
        "recorded through `ledger.run` with durability `process`"
        if report.settings.generate == "ledger"
        else "inserted in one transaction in the library's encoding (`--quick`)"
    )
    out = [
        "### 3. Memory while replaying\n",
        f"Runs {how}. Each number comes from a fresh subprocess that opens the ledger and "
        "either replays the whole run (`ledger.run` + `run.effect` per step: the real "
        "replay path) or, for contrast, loads all its steps at once (`ledger.steps`). "
        "*tracemalloc peak* is the peak of Python allocations during that call; *RSS* is "
        "the process's resident size (`VmRSS`) before the call and its peak (`VmHWM`) after "
        "it, from a second child without tracemalloc; `ru_maxrss` is not used because on "
        "Linux it carries the parent's resident size at fork across `exec`, so every child "
        "of this (large) benchmark process would start at the parent's size. *pages* counts "
        "the store reads the replay cursor made.\n",
        "| steps | recorded in s | replay: tracemalloc peak MiB | replay: RSS before -> peak "
        "MiB | replay s | pages read (largest) | load all: tracemalloc peak MiB "
        "| load all: RSS before -> peak MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    out += [memory_row(mem) for mem in report.memory]
    return [
        *out,
        "",
        f"Flat means: the replay's tracemalloc peak at the largest size is at most "
        f"{FLAT_FACTOR}x the peak at the smallest, and its RSS growth at most "
        f"{FLAT_RSS_KIB // 1024} MiB more. Measured: {flatness(report.memory)[1]}.\n",
    ]


def memory_row(mem: MemoryResult) -> str:
    rp, rr, la, lr = mem.replay, mem.replay_rss, mem.load_all, mem.load_all_rss
    return (
        f"| {mem.steps:,} | {mem.record_seconds:.1f} | {mib(rp['tracemalloc_peak']):.2f} "
        f"| {rss_text(rr)} | {rr['seconds']:.2f} | {rp['pages']} ({rp['largest_page']}) "
        f"| {mib(la['tracemalloc_peak']):.2f} | {rss_text(lr)} |"
    )
