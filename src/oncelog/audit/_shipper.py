"""The shipper: a reader of the ledger that sends new journal lines to a sink.

It is never part of a ledger write: agents write as they always do, and a sink that is
down only makes the shipper fall behind, the ledger itself holding what is not yet sent.
Delivery is at least once: the position is saved (``_ship_state``) after each batch the
sink accepted, so a shipper killed mid-batch sends that batch again when it restarts.
"""

from __future__ import annotations

import fcntl
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Protocol

from .._exceptions import ConfigurationError, OnceLogError, SinkUnavailable
from ..records._records import Checkpoint, JournalEntry
from . import _ship_state as state
from ._export import checkpoint_line, record_line

log = logging.getLogger("oncelog.sinks")

BATCH_BYTES = 1 << 20  # a batch stops growing past this, whatever its line count

Row = tuple[int, float, str]  # id, at, line
Reader = Callable[[int, int], list[Row]]  # (after id, limit) -> rows in id order


class Journal(Protocol):
    """What the shipper reads of a ledger: ``oncelog.Ledger`` is one. Named here, as the
    ledger stands floors above the audit."""

    def journal(
        self, run_id: str | None = None, *, after: int = 0, limit: int = 1000
    ) -> list[JournalEntry]: ...

    def checkpoints(
        self, run_id: str | None = None, *, after_id: int = 0, limit: int = 1000
    ) -> list[Checkpoint]: ...


class Sink(Protocol):
    def send(self, lines: list[str]) -> None:
        """Deliver the lines (JSON, no newline) or raise: nothing is taken as delivered
        unless this returns."""
        ...


class Shipper:
    """Ships the journal's records and checkpoints to ``sink`` as they are written.

    ``start()`` runs it in a daemon thread that polls every ``poll`` seconds and, after a
    failure, backs off exponentially up to ``max_backoff``; ``ship_once()`` sends what is
    there now. ``state_file`` keeps the position across restarts; one shipper at a time
    may use it, until ``stop()`` or the end of a ``with`` block. ``settle``: see
    ``_ship_state``. Counters: ``shipped`` (lines delivered), ``failures`` (failed sends),
    ``lag`` (journal and checkpoint ids above the delivered position, at the last look).
    """

    def __init__(
        self,
        ledger: Journal,
        sink: Sink,
        state_file: str | Path,
        *,
        poll: float = 0.5,
        batch: int = 500,
        settle: float = 30.0,
        max_backoff: float = 30.0,
        name: str | None = None,
    ) -> None:
        if poll <= 0 or batch <= 0 or settle < 0 or max_backoff < poll:
            raise ConfigurationError(
                "a shipper needs poll > 0, batch > 0, settle >= 0 and max_backoff >= poll"
            )
        self.ledger, self.sink, self.state_file = ledger, sink, Path(state_file)
        self.poll, self.batch, self.settle, self.max_backoff = poll, batch, settle, max_backoff
        self.name = name or str(getattr(sink, "name", type(sink).__name__))
        self.shipped = self.failures = self.lag = 0
        self._state_lock = _StateLock(self.state_file)
        try:
            self._positions = state.load(self.state_file)
        except BaseException:
            self._state_lock.release()
            raise
        self._readers: dict[str, Reader] = {"records": self._records, "checkpoints": self._marks}
        self._newest = dict.fromkeys(state.STREAMS, float("-inf"))  # latest ``at`` read
        self._round = threading.Lock()
        self._failing = 0  # failed rounds in a row, in the thread: the backoff's exponent
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- running ----------------------------------------------------------------------

    def start(self) -> Shipper:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="oncelog-ship", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the batch in hand, and let go of the state file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._state_lock.release()

    def __enter__(self) -> Shipper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.ship_once()
            except Exception as exc:  # the thread carries on, whatever went wrong
                self._failing += 1
                if self._failing == 1:
                    known = isinstance(exc, OnceLogError)
                    log.warning("%s; trying again with backoff (%d lines behind)",
                                exc if known else f"shipping to {self.name} failed: {exc!r}",
                                self.lag, exc_info=not known)  # fmt: skip
            else:
                self._recovered()
            self._stop.wait(min(self.max_backoff, self.poll * 2 ** min(self._failing, 30)))

    def _recovered(self) -> None:
        if self._failing:
            log.warning("shipping to %s again after %d failed tries", self.name, self._failing)
            self._failing = 0

    # -- one round ----------------------------------------------------------------------

    def ship_once(self) -> int:
        """Send every line not yet delivered, batch by batch; the number delivered.
        Raises ``SinkUnavailable`` when the sink refuses a batch (kept for the next try)."""
        with self._round:
            self.lag = sum(self._behind(name) for name in state.STREAMS)
            return sum(self._ship_stream(name) for name in state.STREAMS)

    def _ship_stream(self, name: str) -> int:
        position, delivered = self._positions[name], 0
        for rows in self._batches(name):
            try:
                self.sink.send([line for _, _, line in rows])
            except Exception as exc:
                self.failures += 1
                raise SinkUnavailable(f"sink {self.name} is unavailable: {exc}") from exc
            self._recovered()
            position.delivered([(ident, at) for ident, at, _ in rows])
            position.advance(self._newest[name], time.monotonic(), self.settle)
            state.save(self.state_file, self._positions)
            delivered += len(rows)
            self.shipped += len(rows)
            self.lag = max(0, self.lag - len(rows))
            if self._stop.is_set():  # stopping: the rest waits for the next start
                break
        if position.advance(self._newest[name], time.monotonic(), self.settle):
            state.save(self.state_file, self._positions)
        return delivered

    def _batches(self, name: str) -> Iterator[list[Row]]:
        """Rows not yet delivered, read from the mark on, in batches."""
        position, read = self._positions[name], self._readers[name]
        after, size = position.low, 0
        batch: list[Row] = []
        while page := read(after, self.batch):
            after = page[-1][0]
            self._newest[name] = max(self._newest[name], *(at for _, at, _ in page))
            for row in page:
                if row[0] in position.above:
                    continue
                if batch and (len(batch) == self.batch or size + len(row[2]) > BATCH_BYTES):
                    yield batch
                    batch, size = [], 0
                batch.append(row)
                size += len(row[2])
        if batch:
            yield batch

    def _behind(self, name: str) -> int:
        """Ids above the position (gaps not yet settled count too), by a galloping search
        for the last id: a few index look-ups, however far behind."""
        position, read = self._positions[name], self._readers[name]

        def first_after(ident: int) -> int | None:
            rows = read(ident, 1)
            return rows[0][0] if rows else None

        known, step, bound = position.low, 1, None  # no id is above ``bound``
        while (found := first_after(known)) is not None:
            known = found
            if bound is not None and bound <= known:  # written while we looked
                step, bound = 1, None
            probe = known + step if bound is None else (known + bound) // 2
            if probe > known:
                if (found := first_after(probe)) is None:
                    bound = probe
                else:
                    known, step = found, step * 2
        return known - position.low - len(position.above)

    def _records(self, after: int, limit: int) -> list[Row]:
        entries = self.ledger.journal(None, after=after, limit=limit)
        return [(entry.id, entry.at, record_line(entry)) for entry in entries]

    def _marks(self, after: int, limit: int) -> list[Row]:
        marks = self.ledger.checkpoints(None, after_id=after, limit=limit)
        return [(mark.id, mark.at, checkpoint_line(mark)) for mark in marks]


class _StateLock:
    """An exclusive lock on ``STATE.lock``, so two shippers never share a position. The
    kernel lets go of it when the process dies, however it dies."""

    def __init__(self, state_file: Path) -> None:
        path = state_file.with_name(state_file.name + ".lock")
        try:
            self._file: IO[str] | None = path.open("a")
        except OSError as exc:
            raise ConfigurationError(f"cannot use the state file {state_file}: {exc}") from exc
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self.release()
            raise ConfigurationError(
                f"another shipper is using the state file {state_file}"
            ) from exc

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
