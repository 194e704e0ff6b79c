"""Who may use the console: the login token, signed session cookies, CSRF tokens, and the
host names and origins a request may come with."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass

SESSION_SECONDS = 12 * 3600  # a session outlives a shift, not a day


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as it is written in a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True)
class Access:
    """Everything needed to judge a request; no state kept per session."""

    token: str
    hosts: frozenset[str]  # acceptable values of the Host header
    cookie_name: str

    @classmethod
    def for_address(cls, token: str, host: str, port: int, also: tuple[str, ...] = ()) -> Access:
        """Accept the bound address, ``localhost`` when it is a loopback one, and the
        names in ``also``: any other Host header is a DNS rebinding attempt."""
        names = {url_host(host), *(url_host(name) for name in also)}
        if is_loopback(host):
            names.add("localhost")
        hosts = {f"{name}:{port}" for name in names}
        if port == 80:
            hosts |= names  # browsers leave the default port out
        # Cookies are per host, not per port: two consoles must not share one cookie.
        return cls(token, frozenset(hosts), f"oncelog_console_{port}")

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def new_session(self) -> str:
        """A cookie value: a random session id and its issue time, signed with the token
        (so a new token ends every session)."""
        payload = f"{secrets.token_urlsafe(24)}.{int(time.time())}"
        return f"{payload}.{self._mac('session', payload)}"

    def session(self, cookie: str | None) -> str | None:
        """The session id in a valid, unexpired cookie, else None."""
        if not cookie or cookie.count(".") != 2:
            return None
        payload, mac = cookie.rsplit(".", 1)
        if not hmac.compare_digest(mac.encode(), self._mac("session", payload).encode()):
            return None
        session, issued = payload.split(".")
        if not issued.isdigit() or time.time() - int(issued) > SESSION_SECONDS:
            return None
        return session

    def csrf_token(self, session: str) -> str:
        return self._mac("csrf", session)

    def csrf_ok(self, session: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.csrf_token(session).encode())

    def _mac(self, purpose: str, message: str) -> str:
        key = self.token.encode()
        return hmac.new(key, f"{purpose}:{message}".encode(), hashlib.sha256).hexdigest()
