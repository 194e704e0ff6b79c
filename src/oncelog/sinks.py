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

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from ._exceptions import ConfigurationError, SinkUnavailable
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
    """POST each batch as ``application/x-ndjson``; a 2xx answer means delivered. Redirects
    are not followed (a redirected POST would lose its body): they count as failures."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        name: str = "http",
    ) -> None:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise ConfigurationError(f"an HTTP sink needs an http:// or https:// URL, not {url!r}")
        self.url, self.timeout, self.name = url, timeout, name
        self.headers = {"Content-Type": "application/x-ndjson", **(headers or {})}
        self._opener = urllib.request.build_opener(_RefuseRedirects)

    def send(self, lines: list[str]) -> None:
        body = "".join(line + "\n" for line in lines).encode()
        request = urllib.request.Request(self.url, body, self.headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            raise SinkUnavailable(f"{self.url} answered {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise SinkUnavailable(f"{self.url}: {exc}") from exc
        if not 200 <= status < 300:
            raise SinkUnavailable(f"{self.url} answered {status}")


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # urllib then raises HTTPError with the 3xx status
