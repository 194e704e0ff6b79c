"""Reading and checking a prune's archive (``_prune``).

On its own, an archive is checked as the ledger's journal is: each run's records chain
from ``GENESIS`` in order, the chain's length and head are the ones its ``pruned_run`` line
says, and each checkpoint's signature (with public keys) and head hold. Against the ledger
it is checked against the anchor: the ledger's ``runs_pruned`` records that name the
archive's SHA-256 hold each run they removed with that same length and head, and the
chain under no run that holds them verifies (``oncelog verify``), signed where the ledger
has a key. A run of the archive that no anchor names was not removed by its prune (it
changed meanwhile, or another prune removed it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ArchiveExists, ConfigurationError
from ..records._chain import GENESIS, checkpoint_payload, follows
from ..records._records import Checkpoint
from ..records._retention import PrunedRun
from ..stores._protocol import Store
from . import _pages as pages
from ._signing import Verifier

ARCHIVE = "prune_archive"


@dataclass
class ArchiveReport:
    archive: str
    runs: int = 0
    records: int = 0
    checkpoints: int = 0
    signatures_checked: bool = False
    anchored: int = 0  # runs an anchor in the ledger names with the same chain
    unanchored: list[str] = field(default_factory=list)  # archived, removed by no anchor
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with path.open(encoding="utf-8") as text:
            for number, line in enumerate(text, 1):
                try:
                    item = json.loads(line)
                except ValueError as exc:
                    raise ConfigurationError(f"{path}:{number} is not JSON: {exc}") from exc
                if not isinstance(item, dict):
                    raise ConfigurationError(f"{path}:{number} is not an archive line")
                yield number, item
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as data:
            while chunk := data.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc
    return digest.hexdigest()


def read_archive(path: Path) -> tuple[list[PrunedRun], str]:
    """The runs a prune archive says it holds, and its SHA-256; ``ArchiveExists`` if the
    file is something else (it is never written over)."""
    runs: list[PrunedRun] = []
    try:
        for number, item in _lines(path):
            if number == 1 and item.get("type") != ARCHIVE:
                raise ValueError("no prune_archive line first")
            if item.get("type") == "pruned_run":
                runs.append(PrunedRun(str(item["run_id"]), int(item["entries"]), str(item["head"])))
        if not runs:
            raise ValueError("no run in it")
    except (ConfigurationError, KeyError, TypeError, ValueError) as exc:
        raise ArchiveExists(
            f"{path} already exists and is not a prune archive ({exc}): prune writes a new file"
        ) from exc
    return runs, file_sha256(path)


def verify_archive(
    path: str | os.PathLike[str],
    *,
    store: Store | None = None,
    public_keys: Iterable[str | Path] = (),
) -> ArchiveReport:
    """Check a prune archive on its own and, given the ledger's store, against its anchors."""
    path = Path(path)
    keys = list(public_keys)
    verifier = Verifier(keys) if keys else None
    report = ArchiveReport(str(path), signatures_checked=verifier is not None)
    chains: dict[str, tuple[str, int, dict[int, str]]] = {}  # prev, length, heads by length
    marks: list[Checkpoint] = []
    said: dict[str, tuple[int, str]] = {}
    for number, item in _lines(path):
        kind = item.get("type")
        try:
            if number == 1:
                if kind != ARCHIVE:
                    raise ConfigurationError(f"{path} is not a prune archive")
            elif kind == "record":
                report.records += 1
                run_id = str(item["run_id"])
                prev, length, heads = chains.setdefault(run_id, (GENESIS, 0, {}))
                if item["hash"] is None:
                    continue
                if not follows(
                    prev,
                    run_id,
                    item["seq"],
                    item["event"],
                    item["data"],
                    item["at"],
                    item["hash"],
                ):
                    report.problems.append(
                        f"{path}:{number}: record {item['id']} of run {run_id!r} does not "
                        "follow from the record before it: it was edited, inserted or moved"
                    )
                heads[length + 1] = item["hash"]
                chains[run_id] = (item["hash"], length + 1, heads)
            elif kind == "checkpoint":
                fields = ("id", "run_id", "entries", "head", "at", "key_id", "signature")
                marks.append(Checkpoint(*(item[name] for name in fields)))
            elif kind == "pruned_run":
                report.runs += 1
                said[str(item["run_id"])] = (int(item["entries"]), str(item["head"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"{path}:{number} is not an archive line: {exc}") from exc
    for run_id, (entries, head) in sorted(said.items()):
        _, length, heads = chains.get(run_id, (GENESIS, 0, {}))
        if length != entries or (entries and heads.get(entries) != head):
            report.problems.append(
                f"run {run_id!r}: the archive holds {length} chained records, not the "
                f"{entries} ending in {head[:16]}… it says it archived"
            )
    for mark in marks:
        report.checkpoints += 1
        _check_mark(report, verifier, mark, chains.get(mark.run_id, (GENESIS, 0, {}))[2])
    if store is not None:
        _against_anchors(report, store, file_sha256(path), said)
    return report


def _check_mark(
    report: ArchiveReport, verifier: Verifier | None, mark: Checkpoint, heads: dict[int, str]
) -> None:
    where = f"checkpoint {mark.id} (run {mark.run_id!r}, {mark.entries} records)"
    if verifier is not None:
        wrong = verifier.check(
            mark.key_id, checkpoint_payload(mark.run_id, mark.entries, mark.head, mark.at),
            mark.signature,
        )  # fmt: skip
        if wrong is not None:
            report.problems.append(f"{where}: {wrong}")
            return
    if heads.get(mark.entries) != mark.head:
        report.problems.append(f"{where}: the archive's chain does not end there as signed")


def anchors(store: Store) -> Iterator[tuple[int, dict[str, Any]]]:
    """The ledger's ``runs_pruned`` records: journal id and data."""
    for entry in pages.journal(store, ""):
        if entry.event == "runs_pruned":
            yield entry.id, entry.data


def _against_anchors(
    report: ArchiveReport, store: Store, sha256: str, said: dict[str, tuple[int, str]]
) -> None:
    named: dict[str, tuple[int, str]] = {}
    for _, data in anchors(store):
        if data.get("archive_sha256") != sha256:
            continue
        for run_id, entries, head in data.get("runs", []):
            named[str(run_id)] = (int(entries), str(head))
    if not named:
        report.problems.append(
            f"no anchor in the ledger names this archive (SHA-256 {sha256}): it was changed "
            "after it was written, or it is another ledger's"
        )
        return
    for run_id, anchored in sorted(named.items()):
        if said.get(run_id) != anchored:
            report.problems.append(
                f"run {run_id!r} was removed under this archive with a chain of "
                f"{anchored[0]} records, which the archive does not hold"
            )
    report.anchored = sum(1 for run_id in said if run_id in named)
    report.unanchored = sorted(run_id for run_id in said if run_id not in named)
