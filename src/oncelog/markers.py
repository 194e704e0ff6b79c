"""``oncelog.markers``: effects at providers that take no idempotency key, found again by a
marker they keep.

Most providers an agent acts on keep no key (a Slack message, a GitHub issue, an SMS), so
a resend after a crash acts twice and oncelog can only halt. Where the provider keeps some
text or field with what it made, and lets it be searched, the effect can be found
instead: the tool stamps ``marker(idempotency_key)`` into what it sends, and a
``MarkerProbe`` searches for it when the outcome is in doubt::

    from oncelog import markers

    @ledger.tool(kind="create", probe=markers.MarkerProbe(
        search=lambda marker: tickets.search(marker),         # the provider's search
        marker_of=lambda ticket: markers.stamped(ticket["body"]),
        result_of=lambda ticket: {"id": ticket["id"]},          # what the tool returns
    ))
    def open_ticket(subject: str, body: str, *, idempotency_key: str) -> dict:
        ticket = tickets.create(subject, markers.stamp(body, idempotency_key))
        return {"id": ticket["id"]}

The rules it keeps:

- The marker derives from the effect's idempotency key, which oncelog hands the tool, and
  never from the tool's arguments: a marker the model can write is not a marker. The
  probe compares the marker an item carries with the expected one exactly, and
  ``stamped`` reads it only from the last line of a text, which the tool writes after
  whatever the model wrote.
- Found in exactly one item: ``Found(result_of(item))``. In several: something acted
  twice, and a person looks (``CANNOT_TELL``).
- Found in none: ``NOT_FOUND`` only when the search is declared consistent
  (``consistent_after``), and then only after searching again once that long has passed
  since the probe began, which is after the request was sent. Most providers' searches
  are served from an index or a replica that lags the write (GitHub's and Slack's do):
  without the declaration, none found is ``CANNOT_TELL`` and a person decides.
- The search failing, or an item whose marker cannot be read: ``CANNOT_TELL``.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ._exceptions import ConfigurationError
from ._log import log
from .runtime._probes import CANNOT_TELL, NOT_FOUND, Found, ProbeAnswer

__all__ = ["MarkerProbe", "marker", "stamp", "stamped"]

T = TypeVar("T")

_PREFIX = "oncelog-"
_STAMP = re.compile(r"<!-- (oncelog-[0-9a-f]{32}) -->")


def marker(idempotency_key: str) -> str:
    """The marker of the effect with this key: one word (``oncelog-`` and 32 hex digits,
    a hash of the key), so that a provider's search finds it whole, and the key itself
    is not shown to whoever reads what the provider keeps."""
    if not isinstance(idempotency_key, str) or not idempotency_key:
        raise ConfigurationError(
            f"a marker needs the effect's idempotency key, not {idempotency_key!r}"
        )
    return _PREFIX + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


def stamp(text: str, idempotency_key: str) -> str:
    """``text`` with the effect's marker on a last line of its own, as an HTML comment
    (hidden where the provider renders Markdown or HTML, as GitHub does)."""
    return f"{text}\n\n<!-- {marker(idempotency_key)} -->"


def stamped(text: object) -> str | None:
    """The marker ``stamp`` put on the last line of ``text``; None if that line is not
    one. A marker elsewhere in the text is not read: the model may have written it."""
    if not isinstance(text, str):
        return None
    last = text.rstrip("\n").rpartition("\n")[2]
    found = _STAMP.fullmatch(last)
    return found.group(1) if found else None


@dataclass(frozen=True)
class MarkerProbe(Generic[T]):
    """A probe (``tool(probe=...)``) that finds an effect by its marker.

    ``search(marker)`` returns the items the provider holds that may carry it (a
    search may return more; only exact carriers count). ``marker_of(item)`` reads the
    marker an item carries, from a place the tool wrote and the model did not.
    ``result_of(item)`` is what the tool would have returned for it (the item itself by
    default). ``consistent_after``: the provider's search is declared to show every
    item whose request was sent at least that long ago (its processing time plus its
    index's lag); None, the default, when not known: then nothing found is never taken
    for "not there". ``sleep`` waits that long (a test may pass another)."""

    search: Callable[[str], Iterable[T]]
    marker_of: Callable[[T], str | None]
    result_of: Callable[[T], Any] = lambda item: item
    consistent_after: timedelta | None = None
    sleep: Callable[[float], object] = time.sleep

    def __post_init__(self) -> None:
        if self.consistent_after is not None and self.consistent_after <= timedelta(0):
            raise ConfigurationError(
                f"consistent_after must be positive, not {self.consistent_after}"
            )

    def __call__(self, key: str, *args: Any, **kwargs: Any) -> ProbeAnswer:
        """The answer for the effect with idempotency key ``key``; the tool's recorded
        arguments are accepted as the probe contract passes them, and not read."""
        expected = marker(key)
        try:
            carriers = self._carriers(expected)
            if not carriers and self.consistent_after is not None:
                self.sleep(self.consistent_after.total_seconds())
                carriers = self._carriers(expected)
            if len(carriers) == 1:
                return Found(self.result_of(carriers[0]))
        except Exception as exc:  # the provider, or the reading of what it answered
            return _cannot_tell(expected, f"{type(exc).__name__}: {exc}")
        if carriers:
            return _cannot_tell(expected, f"{len(carriers)} items carry it: a person looks")
        if self.consistent_after is None:
            return _cannot_tell(expected, "none found, and the search is not declared "
                                "consistent (consistent_after): it may lag the write")  # fmt: skip
        return NOT_FOUND

    def _carriers(self, expected: str) -> list[T]:
        return [item for item in self.search(expected) if self.marker_of(item) == expected]


def _cannot_tell(expected: str, reason: str) -> ProbeAnswer:
    log.warning("cannot tell whether the effect marked %s was performed: %s", expected, reason)
    return CANNOT_TELL
