"""The support agent's connections to the world: the help desk, the mail server, Stripe.

Nothing here knows about oncelog. Every call that changes something takes an optional
``idempotency_key`` and hands it to the service in that service's own way; oncelog passes
one, derived from the run and the step, and a plain agent has none to give.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import stripe

from oncelog.probes.mail import ImapMailbox, MailFinder, MailSender, SmtpServer
from oncelog.probes.stripe import create_payment, default_client

from . import imap

SENDER = "support@shop.example"
MAIL_DOMAIN = "shop.example"
STRIPE_API_KEY = "sk_test_oncelog_demo"  # localstripe accepts any key that starts with sk_
CURRENCY = "eur"


@dataclass(frozen=True)
class Services:
    """Where the services listen, as whoever started them wrote it down."""

    stripe: str  # the Stripe API base, e.g. http://localhost:8420
    smtp_host: str
    smtp_port: int
    tickets: str  # the help desk's base URL
    imap_port: int | None = None  # Dovecot serving the SMTP server's Maildir, if it runs

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> Services:
        return cls(**json.loads(path.read_text()))


class HelpDesk:
    """The ticket service, over HTTP. It deduplicates by ``Idempotency-Key`` only if it
    was told to; by default two creates are two tickets."""

    def __init__(self, url: str) -> None:
        self.url = url

    def tickets_of(self, requester: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"requester": requester})
        found: list[dict[str, Any]] = self._call("GET", f"/tickets?{query}")["data"]
        return found

    def ticket(self, ticket_id: int) -> dict[str, Any]:
        return self._call("GET", f"/tickets/{ticket_id}")

    def open_ticket(
        self, requester: str, subject: str, body: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        fields = {"requester": requester, "subject": subject, "body": body}
        return self._call("POST", "/tickets", fields, key=idempotency_key)

    def update_ticket(
        self, ticket_id: int, fields: dict[str, Any], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return self._call("PATCH", f"/tickets/{ticket_id}", fields, key=idempotency_key)

    def add_comment(
        self, ticket_id: int, body: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return self._call(
            "POST", f"/tickets/{ticket_id}/comments", {"body": body}, key=idempotency_key
        )

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, key: str | None = None
    ) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=10) as answer:
            result: dict[str, Any] = json.loads(answer.read())
        return result


class Mail:
    """Email over SMTP, through ``oncelog.probes.mail``'s sender. SMTP has no idempotency
    key: the sender stamps the key into the message (its ``Message-ID`` and an
    ``X-Oncelog-Key`` header), so a search of the mail server's store, by a person or by
    the mail probe (``finder``, when Dovecot serves that store over IMAP), can tell
    whether this very message went out. A plain agent has no key that outlives its
    process: it makes up one per call, which protects nothing."""

    def __init__(self, host: str, port: int, imap_port: int | None = None) -> None:
        server = SmtpServer(host, port, security="none", timeout=10)
        self.sender = MailSender(server, SENDER)
        self.finder = None
        if imap_port is not None:
            store = ImapMailbox("127.0.0.1", imap.USER, imap.PASSWORD, port=imap_port,
                                security="none", timeout=10)  # fmt: skip
            # aiosmtpd files a message before its 250: what it accepted is there at once.
            self.finder = MailFinder(store, delivery_delay=timedelta(seconds=2), poll=0.2)

    def send_email(
        self, to: str, subject: str, body: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        key = idempotency_key or f"plain_{uuid.uuid4().hex}"
        return self.sender(to, subject, body, idempotency_key=key)


class Payments:
    """Stripe, through the official client. ``oncelog.probes.stripe.find_payment``, the
    probe of the charge tool, reads the stripe package's global settings, so they are
    set here rather than on a client of our own."""

    def __init__(self, api_base: str) -> None:
        stripe.api_key = STRIPE_API_KEY
        stripe.api_base = api_base
        stripe.max_network_retries = 0  # a dead server should answer at once, not after backoffs

    def find_customer(self, email: str) -> dict[str, Any]:
        [customer] = default_client().v1.customers.list(params={"email": email, "limit": 1}).data
        return {"id": customer.id, "name": customer.name, "email": customer.email}

    def recent_charges(self, customer_id: str) -> list[dict[str, Any]]:
        charges = default_client().v1.charges.list(params={"customer": customer_id}).data
        return [{"id": c.id, "amount": c.amount, "status": c.status} for c in charges]

    def saved_card(self, customer_id: str) -> str:
        cards = default_client().v1.payment_methods.list(
            params={"customer": customer_id, "type": "card"}
        )
        return cards.data[0].id

    def payment_status(self, payment_id: str) -> str:
        return str(default_client().v1.payment_intents.retrieve(payment_id).status)

    def charge(
        self, customer_id: str, cents: int, card: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        # Without a ledger no key outlives the process: a plain agent can only make up a
        # new one per call, which protects nothing once the process is restarted.
        key = idempotency_key or f"plain_{uuid.uuid4().hex}"
        return create_payment(
            cents,
            CURRENCY,
            customer_id,
            idempotency_key=key,
            payment_method=card,
            payment_method_types=["card"],
            confirm=True,
        )


@dataclass(frozen=True)
class Clients:
    """One client per service, as the agent uses them."""

    desk: HelpDesk
    mail: Mail
    payments: Payments

    @classmethod
    def connect(cls, services: Services) -> Clients:
        return cls(
            HelpDesk(services.tickets),
            Mail(services.smtp_host, services.smtp_port, services.imap_port),
            Payments(services.stripe),
        )
