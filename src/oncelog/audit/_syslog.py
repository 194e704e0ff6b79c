"""``SyslogSink``: journal lines as RFC 5424 messages, over UDP, TCP or a unix socket.

Each line is one message: ``<PRI>1 TIMESTAMP HOST oncelog PID MSGID - LINE``, with the
record's or checkpoint's own time as TIMESTAMP and its type (``record``, ``checkpoint``)
as MSGID. Over TCP, messages are framed by octet counting (RFC 6587). Syslog daemons cut
long messages (rsyslog's default limit is 8 KiB), so a line longer than ``max_message``
is sent without its ``data`` (``data_omitted`` gives its length in bytes): the record's
hash, kept, still pins what it was.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from .._exceptions import ConfigurationError, SinkUnavailable

SEVERITY_INFO = 6
USAGE = "a syslog address is udp://HOST:PORT, tcp://HOST:PORT or unix:PATH (e.g. unix:/dev/log)"


class SyslogSink:
    """Send lines to a syslog receiver. UDP has no acknowledgement: a datagram to a
    receiver that is down is lost unless the kernel learns of it (an ICMP "port
    unreachable", reported on a later send); use TCP or a unix socket where that matters."""

    def __init__(
        self,
        address: str,
        *,
        facility: int = 1,  # user
        max_message: int = 8192,
        timeout: float = 10.0,
        name: str = "syslog",
    ) -> None:
        if not 0 <= facility <= 23 or max_message < 512:
            raise ConfigurationError("a syslog facility is 0..23, and max_message >= 512")
        self.address, self.name = address, name
        self.transport, self.target = _parse(address)
        self.max_message, self.timeout = max_message, timeout
        self.priority = facility * 8 + SEVERITY_INFO
        self.host = socket.gethostname()[:255] or "-"
        self._socket: socket.socket | None = None

    def send(self, lines: list[str]) -> None:
        try:
            connection = self._socket or self._connect()
            for line in lines:
                message = self._message(line)
                if self.transport == "tcp":
                    connection.sendall(b"%d %s" % (len(message), message))
                else:
                    connection.send(message)
        except OSError as exc:
            self.close()
            raise SinkUnavailable(f"syslog {self.address}: {exc}") from exc

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def _connect(self) -> socket.socket:
        if self.transport == "tcp":
            connection = socket.create_connection(self.target, timeout=self.timeout)
        else:
            family = socket.AF_UNIX if self.transport == "unix" else _family(self.target)
            connection = socket.socket(family, socket.SOCK_DGRAM)
            connection.settimeout(self.timeout)
            try:
                connection.connect(self.target)  # so a refusal comes back as an error
            except OSError:
                connection.close()
                raise
        self._socket = connection
        return connection

    def _message(self, line: str) -> bytes:
        try:
            item = json.loads(line)
            kind, stamp = str(item["type"])[:32], _timestamp(float(item["at"]))
        except (ValueError, KeyError, TypeError):
            item, kind, stamp = None, "-", "-"
        header = f"<{self.priority}>1 {stamp} {self.host} oncelog {os.getpid()} {kind} - "
        body = line.encode()
        room = self.max_message - len(header.encode())
        if len(body) > room and isinstance(item, dict) and isinstance(item.get("data"), str):
            body = _without_data(item)
        return header.encode() + body


def _without_data(item: dict[str, Any]) -> bytes:
    shortened = {**item, "data": None, "data_omitted": len(item["data"].encode())}
    return json.dumps(shortened, ensure_ascii=False).encode()


def _timestamp(at: float) -> str:
    moment = datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="microseconds")
    return moment.replace("+00:00", "Z")


def _parse(address: str) -> tuple[str, Any]:
    if address.startswith("unix:"):
        path = address.removeprefix("unix:")
        if not path:
            raise ConfigurationError(f"{address!r}: {USAGE}")
        return "unix", path
    parts = urlsplit(address)
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(f"{address!r}: {exc}; {USAGE}") from exc
    if parts.scheme not in ("udp", "tcp") or not parts.hostname or port is None:
        raise ConfigurationError(f"{address!r}: {USAGE}")
    return parts.scheme, (parts.hostname, port)


def _family(target: tuple[str, int]) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(*target, type=socket.SOCK_DGRAM)[0][0]
    except socket.gaierror:
        return socket.AF_INET  # connect() then says why the name does not resolve
