"""Shipping the journal out of the process's failure domain (``docs/sinks.md``).

A ``Shipper`` reads the ledger's journal records and checkpoints as they are written and
sends them, as the JSON lines of ``oncelog export``, to a sink: a file on another volume
(``FileSink``), a syslog receiver (``SyslogSink``) or an HTTP endpoint (``HttpSink``). A
sink is any object with ``send(lines: list[str]) -> None`` that raises when it did not
take them. Ledger writes never wait for a sink: one that is down only makes the shipper
fall behind, and it delivers what it missed once the sink is back.

Delivery is at least once: a receiver de-duplicates by ``(type, id)``, and on PostgreSQL
may get records out of id order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from . import _numbers as numbers
from ._exceptions import ConfigurationError, SinkUnavailable
from ._webhook import checked_url, deliver, redacted
from .audit._ship_state import sync_folder
from .audit._shipper import Shipper, Sink
from .audit._syslog import SyslogSink

__all__ = [
    "FileSink",
    "HttpSink",
    "Shipper",
    "Sink",
    "SinkUnavailable",
    "SyslogSink",
    "open_sink",
]

ADDRESSES = (
    "file:PATH, syslog:udp://HOST:PORT, syslog:tcp://HOST:PORT, syslog:unix:PATH, "
    "http://URL or https://URL"
)


def open_sink(address: str, *, headers: Mapping[str, str] | None = None) -> Sink:
    """The sink an address names (``headers`` go with each HTTP request)."""
    if address.startswith("file:") and address != "file:":
        return FileSink(address.removeprefix("file:"))
    if address.startswith("syslog:"):
        return SyslogSink(address.removeprefix("syslog:"))
    if address.startswith(("http://", "https://")):
        return HttpSink(address, headers=headers)
    raise ConfigurationError(f"unknown sink {address!r}: use {ADDRESSES}")


class FileSink:
    """Append lines to a file, flushed and fsynced with each batch: put it on another
    volume (another disk, a network mount) than the ledger."""

    def __init__(self, path: str | os.PathLike[str], *, name: str = "file") -> None:
        self.path, self.name = Path(path), name
        self._checked = False

    def send(self, lines: list[str]) -> None:
        try:
            created = not self.path.exists()
            with self.path.open("a+b") as out:
                if not self._checked:
                    _cut_torn_line(out.fileno())
                    self._checked = True
                out.write("".join(line + "\n" for line in lines).encode())
                out.flush()
                os.fsync(out.fileno())
            if created:
                sync_folder(self.path.parent)
        except OSError as exc:
            raise SinkUnavailable(f"cannot append to {self.path}: {exc}") from exc


def _cut_torn_line(fd: int) -> None:
    """Drop a last line left without its newline by a crash in the middle of a write: it
    was not taken as delivered, so the shipper sends it again."""
    end = size = os.lseek(fd, 0, os.SEEK_END)
    while end > 0:
        start = max(0, end - (1 << 16))
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    else:
        keep = 0
    if keep != size:
        os.ftruncate(fd, keep)


class HttpSink:
    """POST each batch as ``application/x-ndjson``; a 2xx answer within ``timeout`` seconds
    means delivered. The whole send has that one deadline (a receiver trickling its answer
    cannot hold the shipper), the answer's body is never read, and a redirect is not
    followed (a redirected POST would lose its body, or take it elsewhere): each is a
    failure. The URL may carry a token: messages show its scheme, host and port only, and
    its userinfo is sent as the request's basic credentials."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        name: str = "http",
    ) -> None:
        self.url = checked_url(url, "an HTTP sink's URL")
        self.timeout = numbers.seconds(timeout, "an HTTP sink's timeout")
        self.name = name
        self.headers = {"Content-Type": "application/x-ndjson", **(headers or {})}

    def send(self, lines: list[str]) -> None:
        body = "".join(line + "\n" for line in lines).encode()
        failure = deliver(self.url, body, self.headers, self.timeout)
        if failure is not None:
            raise SinkUnavailable(f"{redacted(self.url)} failed: {failure}")
