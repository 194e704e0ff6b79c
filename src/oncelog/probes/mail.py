"""Email that a resumed run can find again, with the standard library's smtplib and imaplib.

SMTP takes no idempotency key, so a mail tool killed after the server accepted its
message and before oncelog recorded it can only halt for a person, unless the message
can be found. ``MailSender`` stamps the step's idempotency key into every message it
sends: a ``Message-ID`` made from the key by the ledger's secret (``message_id_for``),
and the key itself in an ``X-Oncelog-Key`` header, for people. ``MailFinder`` is the
probe that searches an IMAP mailbox for them; ``mail_tool`` declares the two as one::

    from datetime import timedelta
    from oncelog.probes.mail import ImapMailbox, MailFinder, MailSender, SmtpServer, mail_tool

    smtp = SmtpServer("smtp.example.com", username="agent@shop.example", password="...")
    archive = ImapMailbox("imap.example.com", username="archive@shop.example", password="...")
    send = mail_tool(
        name="send_email",
        sender=MailSender(smtp, "agent@shop.example", archive="archive@shop.example"),
        finder=MailFinder(archive, delivery_delay=timedelta(seconds=30)),
    )
    run.effect("confirm", send, "ada@example.com", "Your refund", "It is on its way.")

Where the finder looks, and what its answers rely on
----------------------------------------------------
``Found({"message_id": ..., "to": [...]})``
    A message in the mailbox carries the key's stamp: its ``Message-ID``'s local part is
    the key's authenticator (``oncelog.markers.authenticator``, an HMAC of the key under a
    key derived from the link secret). Keys can be guessed, and anyone who can send to
    the mailbox chooses a message's headers: a message with the key in its
    ``X-Oncelog-Key`` header, or a Message-ID the secret did not make, is not evidence and
    is passed over (someone who can read the secret can forge one; nobody else can). A
    message sent before stamps were authenticated is passed over too: its in-doubt send
    is settled by a person. A copy exists only once the SMTP server
    accepted the message: the server filed it, delivered it to a recipient, or the sender
    appended it after the server's 250. The result is what the tool returns, built from
    the recorded arguments. Several copies (an appended copy and a delivered one, or a
    server's own second delivery) are one message: Found, logged.
``NOT_FOUND``
    Only from the finder of ``mail_tool``, declared with ``delivery_delay``: nothing
    carried the key when it first looked, nor at any search until ``delivery_delay`` had
    passed since. That is definitive because the mailbox receives every message the
    server accepts, *through the same SMTP transaction*: it is the mailbox of an address
    every message is sent to (``MailSender(archive=...)``, a Bcc refused before DATA if
    the server refuses it), or the server files what it accepts there (Gmail and
    Exchange keep sent copies), and ``delivery_delay`` bounds the time from the end of
    the message's data reaching the server to the copy in the mailbox (the server's work
    before its 250 included). The finder is asked once the sending connection is gone
    (its process dead, or the failed call's socket closed), so the data that reached the
    server had reached it by then: waiting from then on needs no clock shared with the
    ledger's or the server's. A message still queued at the server
    is not absent: a server that may defer local delivery (greylisting, a full disk, a
    relay in between) has no such bound, and the finder must not be given one.
``CANNOT_TELL``
    The mailbox could not be searched (connection, login, a mailbox that does not exist);
    or nothing was found and the search is not authoritative: the finder was declared
    apart from its tool or without ``delivery_delay``. The run halts for a person; the
    reason is logged on the ``oncelog.probes.mail`` logger.

The copy the sender appends to a Sent folder (``MailSender(save_to=...)``) is written
*after* the server's 250, so a process killed between the two leaves a sent message with
no copy there: a folder fed only by that append can prove a message was sent, never that
it was not. Its finder must have no ``delivery_delay``: a mailbox fed by the SMTP
transaction is what lets a crash after the server's 250 be settled without a person.
A process that is not dead but stalled (its lease lost, still holding its SMTP
connection) can still send after the finder answered: mail servers honour no fencing
token, as no provider does.
"""

from __future__ import annotations

import email.parser
import hashlib
import hmac
import imaplib
import logging
import re
import smtplib
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any, Literal

from oncelog import (
    CANNOT_TELL,
    NOT_FOUND,
    ConfigurationError,
    Found,
    InvalidPayload,
    ProbeAnswer,
    Tool,
    markers,
    tool,
)
from oncelog.failures import Failure
from oncelog.failures import smtplib as smtp_failures

__all__ = [
    "KEY_HEADER",
    "ImapMailbox",
    "MailFinder",
    "MailSender",
    "MessageRefused",
    "RecipientsRefused",
    "SmtpServer",
    "classify",
    "mail_tool",
    "message_id_for",
]

log = logging.getLogger(__name__)

KEY_HEADER = "X-Oncelog-Key"
Security = Literal["tls", "starttls", "none"]
_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,200}")  # what oncelog's keys are made of
_DOMAIN = re.compile(r"[A-Za-z0-9.-]{1,253}")


def message_id_for(key: str, domain: str, secret: bytes | None = None) -> str:
    """The ``Message-ID`` of the message sent with ``key``: the same for every attempt,
    the key itself not shown to the recipients, and its local part the key's
    ``oncelog.markers.authenticator`` (under ``secret``, by default the stamp key of the
    ledger whose run is executing), which nobody without the ledger's secret can make."""
    return f"<{markers.authenticator(key, secret)}.oncelog@{domain}>"


@dataclass(frozen=True)
class SmtpServer:
    """Where the sender submits: ``security`` ``starttls`` (port 587), ``tls`` (465) or
    ``none`` (a relay on the same host, or a test's)."""

    host: str
    port: int = 587
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    security: Security = "starttls"
    timeout: float = 30.0


@dataclass(frozen=True)
class ImapMailbox:
    """A mailbox to search or to append to, with the account that reads it."""

    host: str
    username: str
    password: str = field(repr=False)
    mailbox: str = "INBOX"
    port: int = 993
    security: Security = "tls"
    timeout: float = 30.0


class RecipientsRefused(smtplib.SMTPRecipientsRefused):
    """The server refused a recipient (``recipients``: each one's code and reply): the
    sender reset the transaction before DATA, so nobody got the message."""


class MessageRefused(smtplib.SMTPDataError):
    """The server answered the end of the message's data with an error: not accepted."""


def classify(exc: BaseException) -> Failure | None:
    """What a failure of ``MailSender`` means: its own refusals (before DATA, or the
    server's answer to the data) by their codes, a message it would not build refused,
    and anything else by ``oncelog.failures.smtplib``."""
    if isinstance(exc, RecipientsRefused):
        return smtp_failures.refused_recipients(exc.recipients)
    if isinstance(exc, MessageRefused):
        return smtp_failures.by_reply(exc.smtp_code, Failure.IN_DOUBT)
    if isinstance(exc, InvalidPayload):
        return Failure.REFUSED  # raised before connecting: the same message fails again
    return smtp_failures.classify(exc)


@dataclass(frozen=True)
class MailSender:
    """Sends one plain-text message per call, stamped with the step's key, from
    ``from_addr`` through ``server``. ``archive``: an address every message is also sent
    to (a Bcc), whose mailbox a ``MailFinder`` searches; the server must accept it before
    DATA, or nothing is sent. ``save_to``: a folder the message is appended to after the
    server accepted it (a failed append is logged, the message is sent all the same).
    ``domain``: of the ``Message-ID``, by default ``from_addr``'s. ``secret``: the stamp
    key (``Ledger.stamp_key()``), for a sender called outside a run (by default, the
    running ledger's)."""

    server: SmtpServer
    from_addr: str
    archive: str | None = None
    save_to: ImapMailbox | None = None
    domain: str | None = None
    secret: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        domain = self.domain or self.from_addr.rpartition("@")[2]
        if "@" not in self.from_addr or not _DOMAIN.fullmatch(domain):
            raise ConfigurationError(f"no domain for Message-IDs in {self.from_addr!r}")
        for address in (self.from_addr, self.archive):
            if address is not None and _broken(address):
                raise ConfigurationError(f"not an email address: {address!r}")

    def __call__(
        self, to: str | Sequence[str], subject: str, body: str, *, idempotency_key: str
    ) -> dict[str, Any]:
        """Send; returns ``{"message_id": ..., "to": [...]}`` once the server answered
        the end of the data with 250. Its errors are judged by ``classify``."""
        message = self.message(to, subject, body, idempotency_key)
        recipients = [*_addresses(to), *([self.archive] if self.archive else [])]
        smtp = _smtp(self.server)
        try:
            _submit(smtp, self.from_addr, recipients, message)
        finally:
            _close(smtp)
        if self.save_to is not None:
            _append(self.save_to, message)
        return _result(message["Message-ID"], to)

    def message(self, to: str | Sequence[str], subject: str, body: str, key: str) -> EmailMessage:
        """The message as sent for ``key``; bad input raises ``InvalidPayload``."""
        _check_key(key)
        message = EmailMessage()
        try:
            message["From"] = self.from_addr
            message["To"] = ", ".join(_addresses(to))
            message["Subject"] = subject
        except ValueError as exc:  # a header with a line break in it
            raise InvalidPayload(f"cannot send this message: {exc}") from exc
        domain = self.domain or _domain_of(self.from_addr)
        try:
            message["Message-ID"] = message_id_for(key, domain, self.secret)
        except ConfigurationError:
            # Sent outside a run, with no ledger behind it: a plain Message-ID, which no
            # finder takes for evidence.
            message["Message-ID"] = f"<{hashlib.sha256(key.encode()).hexdigest()[:32]}@{domain}>"
        message[KEY_HEADER] = key
        message.set_content(body)
        return message


def _addresses(to: str | Sequence[str]) -> list[str]:
    found = [to] if isinstance(to, str) else list(to)
    if not found or any(not isinstance(a, str) or "@" not in a or _broken(a) for a in found):
        raise InvalidPayload(f"not a list of email addresses: {to!r}")
    return found


def _broken(text: str) -> bool:
    return any(char in text for char in "\r\n<>,")


def _domain_of(address: str) -> str:
    return address.rpartition("@")[2]


def _check_key(key: str) -> None:
    if not _KEY.fullmatch(key):
        raise InvalidPayload(f"an idempotency key cannot go into a mail header: {key!r}")


def _smtp(server: SmtpServer) -> smtplib.SMTP:
    if server.security == "tls":
        context = ssl.create_default_context()
        smtp: smtplib.SMTP = smtplib.SMTP_SSL(
            server.host, server.port, timeout=server.timeout, context=context
        )
    else:
        smtp = smtplib.SMTP(server.host, server.port, timeout=server.timeout)
    try:
        if server.security == "starttls":
            smtp.starttls(context=ssl.create_default_context())
        if server.username is not None:
            smtp.login(server.username, server.password or "")
    except BaseException:
        smtp.close()
        raise
    return smtp


def _close(smtp: smtplib.SMTP) -> None:
    """Ends the session, raising nothing: an error after the server's 250 (a QUIT that
    times out) must not make a sent message look unsent."""
    try:
        smtp.quit()
    except OSError:  # smtplib's errors are OSErrors
        smtp.close()


def _submit(smtp: smtplib.SMTP, sender: str, recipients: list[str], message: EmailMessage) -> None:
    """One SMTP transaction, all recipients or none: a refused one resets it before DATA
    (``sendmail`` would send to the others, and a refused archive would leave a sent
    message the finder cannot see)."""
    smtp.ehlo_or_helo_if_needed()
    code, reply = smtp.mail(sender)
    if code != 250:
        raise smtplib.SMTPSenderRefused(code, reply, sender)
    refused = {}
    for recipient in recipients:
        code, reply = smtp.rcpt(recipient)
        if code not in (250, 251):
            refused[recipient] = (code, reply)
    if refused:
        smtp.rset()
        raise RecipientsRefused(refused)
    code, reply = smtp.data(message.as_bytes(policy=SMTP))
    if code != 250:
        raise MessageRefused(code, reply)


def _append(folder: ImapMailbox, message: EmailMessage) -> None:
    when = imaplib.Time2Internaldate(time.time())
    try:
        with _imap(folder) as imap:
            imap.append(_quoted(folder.mailbox), r"(\Seen)", when, message.as_bytes(policy=SMTP))
    except (OSError, imaplib.IMAP4.error) as exc:
        log.warning("sent %s but could not append it to %s: %s",
                    message["Message-ID"], folder.mailbox, exc)  # fmt: skip


def _imap(folder: ImapMailbox) -> imaplib.IMAP4:
    if folder.security == "tls":
        context = ssl.create_default_context()
        imap: imaplib.IMAP4 = imaplib.IMAP4_SSL(
            folder.host, folder.port, ssl_context=context, timeout=folder.timeout
        )
    else:
        imap = imaplib.IMAP4(folder.host, folder.port, timeout=folder.timeout)
    try:
        if folder.security == "starttls":
            imap.starttls(ssl.create_default_context())
        imap.login(folder.username, folder.password)
    except BaseException:
        imap.shutdown()
        raise
    return imap


def _quoted(text: str) -> str:
    if _broken(text) or '"' in text or "\\" in text:
        raise ConfigurationError(f"cannot name this in IMAP: {text!r}")
    return f'"{text}"'


def _result(message_id: str, to: str | Sequence[str]) -> dict[str, Any]:
    """What the agent sees, the same from the call and from the finder."""
    return {"message_id": message_id, "to": _addresses(to)}


class _CannotSearch(Exception):
    """Why the mailbox could not be searched."""


@dataclass(frozen=True)
class MailFinder:
    """A probe for messages sent by ``MailSender``: searches ``mailbox``. ``domain``: of
    the ``Message-ID``s, when not the sent ``To``'s sender's (``mail_tool`` sets it).
    ``delivery_delay``: declares that every message the server accepts lands in this
    mailbox within that time (see the module's docstring); only then, and only for the
    finder ``mail_tool`` declares (``sees_its_tool``), may it answer ``NOT_FOUND``.
    ``poll``: seconds between searches while it waits. ``secret``: the stamp key, for a
    finder asked outside a run (by default, the running ledger's)."""

    mailbox: ImapMailbox
    delivery_delay: timedelta | None = None
    domain: str | None = None
    poll: float = 0.5
    sees_its_tool: bool = False
    secret: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.delivery_delay is not None and self.delivery_delay < timedelta(0):
            raise ConfigurationError(f"delivery_delay must not be negative: {self.delivery_delay}")
        if self.poll <= 0:
            raise ConfigurationError(f"poll must be positive, not {self.poll}")
        _quoted(self.mailbox.mailbox)

    def __call__(self, key: str, *args: Any, **kwargs: Any) -> ProbeAnswer:
        """The answer for the message sent with ``key``; ``to`` is read from the recorded
        arguments, for the result."""
        to = args[0] if args else kwargs.get("to", [])
        asked = time.monotonic()
        wait = self.delivery_delay.total_seconds() if self.delivery_delay is not None else 0.0
        try:
            _check_key(key)
            while not (found := self._carrying(key)) and time.monotonic() - asked < wait:
                time.sleep(self.poll)
            result = _result(found[0], to) if found else None
        except (OSError, imaplib.IMAP4.error, _CannotSearch, InvalidPayload) as exc:
            return _cannot_tell(key, f"{type(exc).__name__}: {exc}")
        if result is not None:
            if len(found) > 1:
                log.info("%d copies of the message with key %s in %s", len(found), key,
                         self.mailbox.mailbox)  # fmt: skip
            return Found(result)
        if not self.sees_its_tool or self.delivery_delay is None:
            return _cannot_tell(key, f"no message in {self.mailbox.mailbox} carries it, and "
                                "this finder does not know every sent message lands there: "
                                "declare it with mail_tool and a delivery_delay")  # fmt: skip
        return NOT_FOUND

    def _carrying(self, key: str) -> list[str]:
        """The Message-IDs of the messages in the mailbox stamped for the key: a
        Message-ID whose local part is the key's authenticator. A message that carries
        the key in its ``X-Oncelog-Key`` header, or a Message-ID of another form, is not
        one: a key can be guessed, and anyone can send a message with any headers (IMAP's
        header search matches substrings: each hit is read and compared whole)."""
        stamp = f"<{markers.authenticator(key, self.secret)}.oncelog@"
        criteria = ["OR", "HEADER", KEY_HEADER, f'"{key}"', "HEADER", "Message-ID", f'"{stamp}"']
        with _imap(self.mailbox) as imap:
            status, _ = imap.select(_quoted(self.mailbox.mailbox), readonly=True)
            if status != "OK":
                raise _CannotSearch(f"cannot open mailbox {self.mailbox.mailbox}")
            status, hits = imap.uid("SEARCH", *criteria)
            if status != "OK":
                raise _CannotSearch(f"the search was refused: {hits!r}")
            uids = b" ".join(part for part in hits if isinstance(part, bytes)).split()
            headers = [_headers(imap, uid) for uid in uids]
        expected = stamp.encode()
        return [
            found["message-id"]
            for found in headers
            if hmac.compare_digest(found.get("message-id", "")[: len(stamp)].encode(), expected)
        ]


def _headers(imap: imaplib.IMAP4, uid: bytes) -> dict[str, str]:
    """A message's key and Message-ID headers, by lower-cased name."""
    fields = f"(BODY.PEEK[HEADER.FIELDS ({KEY_HEADER} MESSAGE-ID)])"
    status, data = imap.uid("FETCH", uid.decode(), fields)
    if status != "OK":
        raise _CannotSearch(f"cannot read message {uid.decode()}: {data!r}")
    raw = b"".join(part[1] for part in data if isinstance(part, tuple))
    parsed = email.parser.BytesHeaderParser(policy=SMTP).parsebytes(raw)
    return {name.lower(): str(value).strip() for name, value in parsed.items()}


def _cannot_tell(key: str, reason: str) -> ProbeAnswer:
    log.warning("cannot tell whether the message with key %s was sent: %s", key, reason)
    return CANNOT_TELL


def mail_tool(
    *, name: str, sender: MailSender, finder: MailFinder | None = None, **options: Any
) -> Tool[..., dict[str, Any]]:
    """``sender`` declared as a ``create`` tool named ``name``, its failures judged by
    ``classify``, with ``finder`` as its probe (given the sender's Message-ID domain,
    and allowed to answer ``NOT_FOUND`` if it has a ``delivery_delay``). Other
    ``options`` go to ``oncelog.tool``. An archive the finder does not search, or a
    finder searching only the folder the sender appends to, is the caller's to avoid:
    the module's docstring says why the latter cannot prove a message unsent."""
    probe = None
    if finder is not None:
        domain = sender.domain or _domain_of(sender.from_addr)
        probe = replace(finder, domain=domain, sees_its_tool=True)
        if finder.delivery_delay is not None and _same_folder(sender.save_to, finder.mailbox):
            raise ConfigurationError(
                "the finder searches the folder the sender appends to after sending: "
                "a crash between the two leaves a sent message it cannot see, so it "
                "cannot have a delivery_delay (search the archive's mailbox instead)"
            )
    options.setdefault("failures", classify)

    def send_email(
        to: str | list[str], subject: str, body: str, *, idempotency_key: str
    ) -> dict[str, Any]:
        return sender(to, subject, body, idempotency_key=idempotency_key)

    return tool(kind="create", name=name, probe=probe, **options)(send_email)


def _same_folder(folder: ImapMailbox | None, other: ImapMailbox) -> bool:
    return folder is not None and (folder.host, folder.port, folder.username, folder.mailbox) == (
        other.host, other.port, other.username, other.mailbox)  # fmt: skip
