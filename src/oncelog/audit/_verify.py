"""Checking the journal: every record's hash, every checkpoint's signature and head.

A record whose hash does not follow from the one before it in its run was edited,
inserted, or has a neighbour deleted or moved; checking goes on from the stored hash, so
each break is reported once, where it is. A checkpoint says how long a run's chain was
and how it ended: a shorter chain was truncated, another head means it was rewritten.
Checkpoints exported elsewhere (``against``) catch a tail cut off together with the
checkpoints kept beside it. Records may lack a hash only up to where the chain started
(``chain_from``, recorded by migration 9), so removing hashes cannot pass records off as
older than the chain. Last, the tables replay and the controls read must agree with the
journal (``_verify_state``): an edit that bypassed the journal shows there, and so does a
step whose run's row is gone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .._exceptions import ConfigurationError
from ..records._chain import GENESIS, checkpoint_payload, follows
from ..records._records import Checkpoint, JournalEntry
from ..stores._protocol import Store
from . import _pages as pages
from ._signing import Verifier
from ._verify_state import StateCheck, state_differences


@dataclass(frozen=True)
class Problem:
    kind: str  # broken_link | unchained | truncated | rewritten | bad_signature | state
    #            | orphan_steps | budget_totals | subject_twice
    run_id: str
    message: str
    record_id: int | None = None  # the journal id where it shows
    position: int | None = None  # the record's place in its run's chain, from 1


@dataclass
class Report:
    records: int = 0
    runs: int = 0
    before_chain: int = 0  # records up to chain_from: written before the chain (schema 7)
    checkpoints: int = 0
    signatures_checked: bool = False
    problems: list[Problem] = field(default_factory=list)
    # Retention: runs removed by ``oncelog prune``, their chains' records, and the
    # journal ids of the ``runs_pruned`` records that anchor them (with their archives).
    pruned_runs: int = 0
    pruned_records: int = 0
    anchors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Chain:
    prev: str = GENESIS
    length: int = 0
    heads: dict[int, str] = field(default_factory=dict)  # at checkpointed lengths


def read_checkpoints(path: str | os.PathLike[str]) -> list[Checkpoint]:
    """The checkpoints of an ``oncelog export`` file (other lines are skipped)."""
    found = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        try:
            item = json.loads(line)
            if item.get("type") == "checkpoint":
                fields = ("id", "run_id", "entries", "head", "at", "key_id", "signature")
                found.append(Checkpoint(*(item[name] for name in fields)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(f"{path}:{number} is not an export line: {exc}") from exc
    return found


def verify(
    store: Store,
    *,
    public_keys: Iterable[str | Path] = (),
    against: Iterable[Checkpoint] = (),
    run_id: str | None = None,
) -> Report:
    """Check the journal (of one run, or all) and its checkpoints."""
    keys = list(public_keys)
    verifier = Verifier(keys) if keys else None
    report = Report(signatures_checked=verifier is not None)
    signed: list[tuple[str, Checkpoint]] = [
        ("the ledger", c) for c in pages.checkpoints(store, run_id)
    ]
    signed += [("the export", c) for c in against if run_id is None or c.run_id == run_id]
    chains: dict[str, _Chain] = {}
    for _, mark in signed:
        chains.setdefault(mark.run_id, _Chain()).heads[mark.entries] = ""
    state = StateCheck()
    chain_from = _chain_from(store, report)
    pruned: dict[str, tuple[int, str]] = {}  # by run: its chain as a prune removed it
    for entry in pages.journal(store, run_id):
        report.records += 1
        state.feed(entry)
        if entry.run_id == "" and entry.event == "runs_pruned":
            _count_pruned(report, pruned, entry)
        chain = chains.setdefault(entry.run_id, _Chain())
        if entry.hash is None:
            if entry.id > chain_from:
                report.problems.append(Problem(
                    "unchained", entry.run_id,
                    f"record {entry.id} has no hash, but every record after {chain_from} was "
                    "written with one: its hash was removed", entry.id,
                ))  # fmt: skip
            else:
                report.before_chain += 1
            continue
        chain.length += 1
        if not follows(
            chain.prev, entry.run_id, entry.seq, entry.event, entry.data_json, entry.at, entry.hash
        ):
            report.problems.append(Problem(
                "broken_link", entry.run_id,
                f"record {entry.id} (run {entry.run_id!r}, record {chain.length} of its chain, "
                f"{entry.event}) does not follow from the record before it: it was edited or "
                "inserted, or a record before it was deleted or moved",
                entry.id, chain.length,
            ))  # fmt: skip
        chain.prev = entry.hash
        if chain.length in chain.heads:
            chain.heads[chain.length] = entry.hash
    report.runs = sum(1 for chain in chains.values() if chain.length)
    journal_again = lambda: pages.journal(store, run_id)  # noqa: E731
    for kind, run, message in state_differences(store, run_id, state, journal_again):
        report.problems.append(Problem(kind, run, message))
    check_budget_totals(store, report, run_id)
    for source, mark in signed:
        report.checkpoints += 1
        _check_checkpoint(report, verifier, source, mark, chains[mark.run_id], pruned)
    return report


def _count_pruned(report: Report, pruned: dict[str, tuple[int, str]], entry: JournalEntry) -> None:
    """A prune's anchor: which runs it removed, with their chains' lengths and heads."""
    try:
        removed = [(str(run), int(entries), str(head)) for run, entries, head in entry.data["runs"]]
        archive = str(entry.data["archive"])
    except (KeyError, TypeError, ValueError):
        return  # a malformed record: its broken link is reported by the chain check
    report.anchors.append((entry.id, archive))
    report.pruned_runs += len(removed)
    report.pruned_records += sum(entries for _, entries, _ in removed)
    pruned.update((run, (entries, head)) for run, entries, head in removed)


def _chain_from(store: Store, report: Report) -> int:
    """The last journal id that may lack a hash, as the migration to schema 9 found it."""
    chain_from = store.ledger_meta().get("chain_from")
    if chain_from is None:
        report.problems.append(Problem(
            "unchained", "", "the ledger's record of where its chain starts (chain_from in "
            "ledger_meta) was deleted: every record must carry a hash",
        ))  # fmt: skip
        return 0
    return chain_from


def check_budget_totals(store: Store, report: Report, run_id: str | None) -> None:
    """The running totals every intent checks a budget against (kept on the run's row and
    the agent's day row as steps are written) agree with the steps they count. A
    difference means a table was edited outside oncelog; budgets would be judged on it."""
    for drift in store.budget_drift(run_id):
        whose = f"run {drift.target!r}" if drift.scope == "run" else f"agent {drift.target!r}"
        if drift.day is not None:
            whose += f" for the day to come that starts at {drift.day} (UTC, Unix seconds)"
        report.problems.append(Problem(
            "budget_totals", drift.target if drift.scope == "run" else "",
            f"the budget totals of {whose} are {list(drift.kept)} but its steps count "
            f"{list(drift.counted)}",
        ))  # fmt: skip


def _check_checkpoint(
    report: Report,
    verifier: Verifier | None,
    source: str,
    mark: Checkpoint,
    chain: _Chain,
    pruned: dict[str, tuple[int, str]],
) -> None:
    where = f"checkpoint {mark.id} from {source} (run {mark.run_id!r}, {mark.entries} records)"
    if verifier is not None:
        payload = checkpoint_payload(mark.run_id, mark.entries, mark.head, mark.at)
        wrong = verifier.check(mark.key_id, payload, mark.signature)
        if wrong is not None:
            report.problems.append(Problem("bad_signature", mark.run_id, f"{where}: {wrong}"))
            return
    removed = pruned.get(mark.run_id)
    if not chain.length and removed is not None and removed[0] >= mark.entries:
        # Pruned: the chain is in the archive; a checkpoint of its end must name its head.
        if removed[0] == mark.entries and removed[1] != mark.head:
            report.problems.append(Problem(
                "rewritten", mark.run_id,
                f"{where}: the run was pruned with another head than the one signed: the "
                "chain was rewritten before it was pruned",
            ))  # fmt: skip
    elif chain.length < mark.entries:
        report.problems.append(Problem(
            "truncated", mark.run_id,
            f"{where}: the journal holds only {chain.length} records of that run: its tail "
            "was cut off",
        ))  # fmt: skip
    elif chain.heads.get(mark.entries) != mark.head:
        report.problems.append(Problem(
            "rewritten", mark.run_id,
            f"{where}: record {mark.entries} of the run's chain is not the one signed: the "
            "chain was rewritten",
        ))  # fmt: skip
