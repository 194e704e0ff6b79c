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
  probe compares the marker an item carries with the expected one exactly (in constant
  time), and ``stamped`` reads it only from the last line of a text, which the tool
  writes after whatever the model wrote.
- The marker is an authenticator: an HMAC-SHA256 of the key under the ledger's stamp key
  (``authenticator``), derived for stamps alone from the link secret
  (``$ONCELOG_LINK_SECRET``, else the ``link-secret`` file beside a SQLite ledger). A key
  can be guessed (it derives from the run, the step and the tool); the marker cannot be
  made without the secret, so an item planted by a third party, or written by the model
  through another tool, carries no marker the probe accepts, and is not evidence: the
  probe answers as if it were not there. Someone who can read the secret can plant one:
  the stamp protects against whoever cannot, no more. A marker made before stamps were
  authenticated (a plain hash of the key) is not accepted either.
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
import hmac
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ._exceptions import ConfigurationError
from ._log import log
from .runtime._probes import CANNOT_TELL, NOT_FOUND, Found, ProbeAnswer
from .runtime._run import active_stamp_key

__all__ = ["MarkerProbe", "authenticator", "marker", "stamp", "stamped"]

T = TypeVar("T")

_PREFIX = "oncelog-"
_STAMP = re.compile(r"<!-- (oncelog-[0-9a-f]{32}) -->")


def authenticator(idempotency_key: str, secret: bytes | None = None) -> str:
    """32 hex digits that only the ledger can make for this key: an HMAC-SHA256 of it
    under ``secret``, by default the stamp key of the ledger whose run is executing (a
    tool and its probe are called inside one). ``ConfigurationError`` outside a run
    without a ``secret``, and where the ledger has no link secret."""
    if not isinstance(idempotency_key, str) or not idempotency_key:
        raise ConfigurationError(
            f"a stamp needs the effect's idempotency key, not {idempotency_key!r}"
        )
    if secret is None:
        secret = active_stamp_key()
        if secret is None:
            raise ConfigurationError(
                "a stamp is made inside ledger.run(...), whose ledger keeps the secret "
                "that authenticates it; outside one, pass secret="
            )
    digest = hmac.new(secret, f"oncelog-marker:{idempotency_key}".encode(), hashlib.sha256)
    return digest.hexdigest()[:32]


def marker(idempotency_key: str, secret: bytes | None = None) -> str:
    """The marker of the effect with this key: one word (``oncelog-`` and its 32-digit
    ``authenticator``), so that a provider's search finds it whole, the key itself is
    not shown to whoever reads what the provider keeps, and nobody without the ledger's
    secret can make it."""
    return _PREFIX + authenticator(idempotency_key, secret)


def stamp(text: str, idempotency_key: str, secret: bytes | None = None) -> str:
    """``text`` with the effect's marker on a last line of its own, as an HTML comment
    (hidden where the provider renders Markdown or HTML, as GitHub does)."""
    return f"{text}\n\n<!-- {marker(idempotency_key, secret)} -->"


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
    for "not there". ``sleep`` waits that long (a test may pass another). ``secret``:
    the stamp key, for a probe asked outside a run (by default, the running ledger's)."""

    search: Callable[[str], Iterable[T]]
    marker_of: Callable[[T], str | None]
    result_of: Callable[[T], Any] = lambda item: item
    consistent_after: timedelta | None = None
    sleep: Callable[[float], object] = time.sleep
    secret: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.consistent_after is not None and self.consistent_after <= timedelta(0):
            raise ConfigurationError(
                f"consistent_after must be positive, not {self.consistent_after}"
            )

    def __call__(self, key: str, *args: Any, **kwargs: Any) -> ProbeAnswer:
        """The answer for the effect with idempotency key ``key``; the tool's recorded
        arguments are accepted as the probe contract passes them, and not read."""
        expected = marker(key, self.secret)  # outside a run and without one: raises
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
        return [
            item for item in self.search(expected)
            if hmac.compare_digest((self.marker_of(item) or "").encode(), expected.encode())
        ]  # fmt: skip


def _cannot_tell(expected: str, reason: str) -> ProbeAnswer:
    log.warning("cannot tell whether the effect marked %s was performed: %s", expected, reason)
    return CANNOT_TELL
