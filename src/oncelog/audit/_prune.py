"""Retention: archive completed runs to a file, then remove them from the ledger.

The archive is written whole before anything is removed: to a hidden file beside it,
fsynced, then linked to its name (which fails if a file is there: no archive is ever
overwritten), and the folder fsynced. Its lines are ``oncelog export``'s (records, then
checkpoints, of each run in turn), a ``prune_archive`` line first and a ``pruned_run``
line after each run, saying its chain's length and head (``_prune_archive``).

Then the runs are removed a batch at a time, each batch one transaction that checks each
run again under its lock (a run that started waiting, went in doubt or was written since
it was archived is kept) and journals what it removed under no run (``runs_pruned``: the
archive's name and SHA-256, each run's chain length and head), with a signed checkpoint
of that chain when the ledger has a signing key: the anchor that ``verify`` counts and
an archive is checked against. A prune killed at any point leaves whole batches removed
and the rest in place; given the same archive again it removes what is left of it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from .._exceptions import ArchiveExists, ConfigurationError
from .._numbers import seconds
from ..records._retention import PrunedRun
from ..stores._protocol import Store
from . import _pages as pages
from ._export import checkpoint_line, record_line
from ._prune_archive import ARCHIVE, read_archive

if TYPE_CHECKING:
    from ._signing import Signer

BATCH = 100  # runs per transaction: a kill loses at most one batch's work, never its rows
LIMIT = 10_000  # runs per prune by default


@dataclass
class PruneReport:
    archive: str | None  # None when no run was due, so no archive was written
    resumed: bool = False  # the archive was there: what is left of it was removed
    archived: int = 0  # runs in the archive
    removed: list[PrunedRun] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # archived runs no longer in the ledger
    kept: list[str] = field(default_factory=list)  # archived runs that may no longer go
    anchors: list[int] = field(default_factory=list)  # journal ids of the runs_pruned records

    @property
    def records(self) -> int:
        return sum(run.entries for run in self.removed)


def checked_windows(
    store: Store, older_than: float | timedelta | None, agents: Mapping[str, float | timedelta]
) -> tuple[float | None, dict[str, float]]:
    """The ledger's window and the agents', in seconds: those given, else the ledger's
    retention policy (``oncelog retention``); ``ConfigurationError`` if neither has one."""
    if older_than is None and not agents:
        stored = store.retention()
        older_than, agents = stored.pop("", None), stored
    windows = {str(agent): seconds(window, f"the window of agent {agent!r}")
               for agent, window in agents.items()}  # fmt: skip
    ledger_window = None if older_than is None else seconds(older_than, "older_than")
    if ledger_window is None and not windows:
        raise ConfigurationError(
            "say how long runs are kept: a window for the ledger or an agent, given or set "
            "as the ledger's retention policy (oncelog retention --set)"
        )
    return ledger_window, windows


def prune(
    store: Store,
    archive: str | os.PathLike[str],
    *,
    older_than: float | timedelta | None,
    agents: Mapping[str, float | timedelta],
    limit: int = LIMIT,
    batch: int = BATCH,
    signer: Signer | None = None,
) -> PruneReport:
    """Archive the runs due (``older_than`` seconds after they ended, or their agent's
    window in ``agents``; neither given, the stored policy's) to ``archive``, then remove
    them; if ``archive`` holds an earlier prune's archive, remove what is left of it."""
    ledger_window, windows = checked_windows(store, older_than, agents)
    for name, value in (("limit", limit), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{name} must be a whole number above 0, not {value!r}")
    path = Path(archive)
    if path.exists():
        runs, digest = read_archive(path)
        report = PruneReport(str(path), resumed=True, archived=len(runs))
    else:
        due = store.prune_candidates(ledger_window, windows, limit)
        if not due:
            return PruneReport(None)
        runs, digest = _write_archive(store, path, due)
        report = PruneReport(str(path), archived=len(runs))
    sign = None if signer is None else (signer.key_id, signer.sign)
    for start in range(0, len(runs), batch):
        done = store.prune_runs(runs[start : start + batch], path.name, digest, sign)
        report.removed += done.removed
        report.gone += done.gone
        report.kept += done.kept
        if done.anchor_id is not None:
            report.anchors.append(done.anchor_id)
    return report


def _write_archive(store: Store, path: Path, due: list[str]) -> tuple[list[PrunedRun], str]:
    """Write the runs' records and checkpoints to ``path``; never over a file there."""
    hidden = path.with_name(f".{path.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    runs: list[PrunedRun] = []
    try:
        fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise ConfigurationError(f"cannot write the archive beside {path}: {exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:

            def write(line: str) -> None:
                text = line + "\n"
                digest.update(text.encode())
                out.write(text)

            write(json.dumps({"type": ARCHIVE, "version": 1, "runs": len(due)}))
            for run_id in due:
                entries, head = 0, ""
                for entry in pages.journal(store, run_id):
                    write(record_line(entry))
                    if entry.hash is not None:
                        entries, head = entries + 1, entry.hash
                for mark in pages.checkpoints(store, run_id):
                    write(checkpoint_line(mark))
                write(json.dumps({"type": "pruned_run", "run_id": run_id, "entries": entries,
                                  "head": head}, ensure_ascii=False))  # fmt: skip
                runs.append(PrunedRun(run_id, entries, head))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(hidden, path)  # fails if the name was taken meanwhile
        except FileExistsError as exc:
            raise ArchiveExists(f"{path} already exists: prune writes a new archive") from exc
        except OSError as exc:
            raise ConfigurationError(f"cannot write the archive {path}: {exc}") from exc
    finally:
        hidden.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return runs, digest.hexdigest()
