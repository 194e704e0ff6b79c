"""Signed decision links: what a person-needed notice carries so that a person can decide
from it, in the console, without looking anything up.

A link names one decision on one thing as the notice saw it: the attempt of an effect in
doubt, the approval request (its id and arguments hash), the kill switch (its id), the
attempts of an effect that was refused or whose retry policy ran out. It is
``{console}/link/{token}``, the token being the decision's claims as URL-safe base64 JSON
and an HMAC-SHA256 of them under the link secret, which the notifying agent and the
console share (``$ONCELOG_LINK_SECRET``, else a file next to a SQLite ledger, made 0600).
A link expires (``ttl``), and a link for attempt 1 cannot decide attempt 2, nor a link
for one step another: every field is signed, the one decision it makes (``choice``)
included. It is good for that decision, once: the decision made through it takes its
nonce in the store, in the decision's own transaction (``stores/_sql_links.py``), so it
never decides twice, even when what it names comes back; and what it names can be decided
once: after any decision (through it, the CLI or the console) the attempt, the request or
the switch it names is gone, and the link page says who decided, when.

A link never decides by being opened: the page it opens asks for one confirming click (a
POST), so a chat client's link preview decides nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from .._commands import oncelog_command, option
from .._exceptions import ConfigurationError, LinkRefused, resolve_command
from .._secret_file import MIN_SECRET_CHARS, private_secret

SECRET_ENV = "ONCELOG_LINK_SECRET"
SECRET_FILE = "link-secret"  # next to a SQLite ledger
DEFAULT_TTL = 3600.0  # seconds: a page at 3 a.m. is acted on within the hour, or by the CLI
MAX_TOKEN_CHARS = 4096

Action = Literal["resolve", "approval", "resume", "retry"]
# What each action may decide: the choice the page opens with.
CHOICES: dict[str, tuple[str, ...]] = {
    "resolve": ("done", "not_done", "abandon"),
    "approval": ("approve", "deny"),
    "resume": ("resume",),
    "retry": ("retry",),
}


@dataclass(frozen=True)
class DecisionLink:
    """What a signed link names: ``action`` on ``run_id``/``step_id`` at ``number`` (the
    attempt in doubt, the approval request's id, or the kill switch's id), with the choice
    the page opens on, until ``expires`` (Unix time). ``args_hash`` binds an approval link
    to the exact arguments; ``nonce`` tells two links apart in the journal."""

    action: Action
    choice: str
    run_id: str
    step_id: str
    number: int
    args_hash: str
    expires: float
    nonce: str


class LinkSigner:
    """Makes and checks the signed links of one console."""

    def __init__(self, secret: bytes, console_url: str, ttl: float = DEFAULT_TTL) -> None:
        self.secret = secret
        self.console_url = console_url.rstrip("/")
        self.ttl = ttl

    def links(
        self, action: Action, run_id: str, step_id: str, number: int, args_hash: str = ""
    ) -> dict[str, str]:
        """One URL per choice the action offers, each with its own nonce."""
        expires = float(int(time.time() + self.ttl))
        return {
            choice: self.url(
                DecisionLink(
                    action,
                    choice,
                    run_id,
                    step_id,
                    number,
                    args_hash,
                    expires,
                    secrets.token_urlsafe(12),
                )
            )
            for choice in CHOICES[action]
        }

    def url(self, link: DecisionLink) -> str:
        return f"{self.console_url}/link/{quote(self.token(link), safe='')}"

    def token(self, link: DecisionLink) -> str:
        payload = _b64(json.dumps(asdict(link), sort_keys=True, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload)}"

    def check(self, token: str, now: float | None = None) -> DecisionLink:
        """The link ``token`` names, if its signature is right and it has not expired;
        else ``LinkRefused`` saying which (nothing of a forged token is trusted)."""
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
            raise LinkRefused("this is not a decision link (damaged or cut short)")
        payload, mac = token.split(".")
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise LinkRefused(
                "this link's signature is wrong: it was not made by this console's notices "
                "(forged, altered, or signed with another link secret)"
            )
        try:
            fields = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            link = DecisionLink(**fields)
        except (ValueError, TypeError, binascii.Error):
            raise LinkRefused("this link is signed but unreadable") from None
        if link.action not in CHOICES or link.choice not in CHOICES[link.action]:
            raise LinkRefused("this link names no decision this console knows")
        if (time.time() if now is None else now) > link.expires:
            raise LinkRefused(
                "this link expired at "
                + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(link.expires)),
                command_for(link),
            )
        return link

    def _mac(self, payload: str) -> str:
        return hmac.new(self.secret, f"oncelog-link:{payload}".encode(), hashlib.sha256).hexdigest()


def command_for(link: DecisionLink) -> str:
    """The command that makes the link's decision, quoted to paste."""
    if link.action == "resolve":
        result = " --result JSON" if link.choice == "done" else ""
        return resolve_command(
            link.run_id, link.step_id, link.number, then=link.choice,
            options=f"--by NAME{result}",
        )  # fmt: skip
    if link.action == "approval":
        return oncelog_command(
            link.choice, [link.run_id, link.step_id],
            options=f"--by NAME --request {link.number}",
        )  # fmt: skip
    if link.action == "retry":
        return oncelog_command("retry", [link.run_id, link.step_id], options="--by NAME --why WHY")
    return oncelog_command("resume", options=f"{option('--run', link.run_id)} --by NAME")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def link_secret(ledger_url: str | None) -> bytes:
    """The secret links are signed with: ``$ONCELOG_LINK_SECRET``, else the file
    ``link-secret`` next to a SQLite ledger (made with 256 random bits, mode 0600, when
    missing). A PostgreSQL ledger has no folder both sides share: it needs the variable."""
    given = os.environ.get(SECRET_ENV)
    if given:
        if len(given) < MIN_SECRET_CHARS:
            raise ConfigurationError(
                f"${SECRET_ENV} must be at least {MIN_SECRET_CHARS} characters "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return given.encode()
    path = _secret_path(ledger_url)
    if path is None:
        raise ConfigurationError(
            f"signed decision links need ${SECRET_ENV} (the same value for the agents and "
            "the console) with a PostgreSQL ledger"
        )
    return private_secret(path, "link secret").encode()


def _secret_path(ledger_url: str | None) -> Path | None:
    if ledger_url is None:
        return None
    if ledger_url.startswith(("postgres://", "postgresql://")):
        return None
    path = ledger_url.removeprefix("sqlite:///") if ledger_url.startswith("sqlite:") else ledger_url
    return Path(path).expanduser().resolve().parent / SECRET_FILE
