"""The ``requestState`` the gateway hands a client whose call waits for a person, and
checks when the client calls again.

A state is the call it was made for (run, step, tool, the SHA-256 of its canonical
arguments), the approval request it waits on, the client it was given to and when it
expires, as URL-safe base64 JSON with an HMAC-SHA256 under a key derived from the
ledger's stamp key (the link secret, which every replica on one ledger shares). The
client cannot read anything into it that the gateway would trust: a state for another
call, request, client or arguments, altered, or expired is refused, and nothing is
recorded or sent upstream. It carries no decision: whether the call may run is the
ledger's journalled approval for that request and arguments hash, used once by the
effect it admits. A state is good once: presented again after its call ran, it is
refused (the gateway looks in the ledger, which every replica shares), and the call's
recorded result is read by calling again without it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Any

MAX_STATE_CHARS = 4096


class StateRefused(Exception):
    """The presented ``requestState`` is not one this gateway made for this call."""


class StateSeal:
    def __init__(self, stamp_key: bytes, ttl: float) -> None:
        self.key = hmac.new(stamp_key, b"oncelog gateway requestState", hashlib.sha256).digest()
        self.ttl = ttl

    def seal(self, claims: dict[str, Any]) -> str:
        fields = {**claims, "expires": int(time.time() + self.ttl)}
        text = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
        payload = base64.urlsafe_b64encode(text).decode().rstrip("=")
        return f"{payload}.{self._mac(payload)}"

    def check(self, token: object, expected: dict[str, Any]) -> dict[str, Any]:
        """The state's claims, if it is ours, unexpired and made for ``expected``."""
        if not isinstance(token, str) or len(token) > MAX_STATE_CHARS or token.count(".") != 1:
            raise StateRefused("requestState is not one this gateway made")
        payload, mac = token.split(".")
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise StateRefused("requestState's signature is wrong (forged or altered)")
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (ValueError, binascii.Error):
            raise StateRefused("requestState is signed but unreadable") from None
        if not isinstance(claims, dict) or not isinstance(claims.get("expires"), int):
            raise StateRefused("requestState is signed but unreadable")
        if time.time() > claims["expires"]:
            raise StateRefused("requestState expired: call again without it")
        wrong = sorted(k for k, v in expected.items() if claims.get(k) != v)
        if wrong:
            raise StateRefused(f"requestState was made for another {', '.join(wrong)}")
        return claims

    def _mac(self, payload: str) -> str:
        return hmac.new(self.key, payload.encode(), hashlib.sha256).hexdigest()
