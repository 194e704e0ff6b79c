"""What a failed send means, and what the finder answers, against a real SMTP server and
Dovecot: the classification of smtplib's errors by where they arose, and the finder's
answers that are not about a crash."""

from __future__ import annotations

import imaplib
import smtplib
from collections.abc import Iterator
from datetime import timedelta

import pytest

import oncelog
from oncelog.failures import Failure
from oncelog.failures import smtplib as smtp_failures
from oncelog.probes.mail import (
    ImapMailbox,
    MailFinder,
    MailSender,
    RecipientsRefused,
    SmtpServer,
    classify,
    mail_tool,
    message_id_for,
)

from .conftest import require
from .support.mail_server import REFUSED_QUIT
from .support.mail_system import (
    DOVECOT_REASON,
    PASSWORD,
    USER,
    MailSystem,
    dovecot_is_installed,
    free_port,
    running_mail_system,
)

REFUSED = "gone@example.com"
STALLS = "slow@example.com"
KEY = "ol1_0123456789abcdef"
SECRET = b"the stamp key of a ledger these calls, made outside a run, stand for"


@pytest.fixture
def mail() -> Iterator[MailSystem]:
    require(dovecot_is_installed(), DOVECOT_REASON)
    with running_mail_system(refuse=REFUSED, stall=STALLS) as system:
        yield system


def sender(mail: MailSystem, timeout: float = 10, **options: object) -> MailSender:
    smtp = SmtpServer("127.0.0.1", mail.smtp_port, security="none", timeout=timeout)
    return MailSender(smtp, "agent@shop.example", **options, secret=SECRET)  # type: ignore[arg-type]


def archive(mail: MailSystem, folder: str = "INBOX", password: str = PASSWORD) -> ImapMailbox:
    return ImapMailbox("127.0.0.1", USER, password, mailbox=folder, port=mail.imap_port,
                       security="none", timeout=10)  # fmt: skip


def failure_of(raises: type[BaseException], send: MailSender, to: str) -> Failure | None:
    with pytest.raises(raises) as raised:
        send(to, "hi", "x", idempotency_key=KEY)
    return classify(raised.value)


def test_a_refused_connection_was_not_sent() -> None:
    smtp = SmtpServer("127.0.0.1", free_port(), security="none", timeout=5)
    send = MailSender(smtp, "agent@shop.example", secret=SECRET)
    assert failure_of(ConnectionRefusedError, send, "ada@example.com") is Failure.NOT_PERFORMED


def test_a_refused_recipient_sends_to_nobody(mail: MailSystem) -> None:
    """One refused recipient (here the archive) resets the transaction before DATA."""
    send = sender(mail, archive=REFUSED)
    with pytest.raises(RecipientsRefused) as raised:
        send("ada@example.com", "hi", "x", idempotency_key=KEY)
    assert classify(raised.value) is Failure.REFUSED
    assert mail.messages() == []


def test_smtplibs_own_refusal_before_data(mail: MailSystem) -> None:
    with (
        smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=10) as smtp,
        pytest.raises(smtplib.SMTPRecipientsRefused) as raised,
    ):
        smtp.sendmail("agent@shop.example", [REFUSED], b"Subject: hi\r\n\r\nx\r\n")
    assert smtp_failures.classify(raised.value) is Failure.REFUSED
    assert smtp_failures.refused_recipients({REFUSED: (450, b"later")}) is Failure.NOT_PERFORMED


def test_a_timeout_inside_data_is_in_doubt(mail: MailSystem) -> None:
    """The server stored the message and answers after the client gave up."""
    send = sender(mail, timeout=1)
    assert failure_of(smtplib.SMTPServerDisconnected, send, STALLS) is Failure.IN_DOUBT
    assert len(mail.with_key(KEY)) == 1
    with (
        smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=1) as smtp,
        pytest.raises(smtplib.SMTPServerDisconnected) as raised,
    ):
        smtp.sendmail("agent@shop.example", [STALLS], b"Subject: hi\r\n\r\nx\r\n")
    assert smtp_failures.classify(raised.value) is Failure.IN_DOUBT


def test_a_message_that_cannot_be_built_is_refused_before_connecting() -> None:
    send = MailSender(
        SmtpServer("127.0.0.1", free_port(), security="none"), "a@shop.example", secret=SECRET
    )
    for to, subject, key in [("ada@example.com", "hi\r\nBcc: eve@example.com", KEY),
                             ("ada@example.com>, eve@example.com", "hi", KEY),
                             ("ada@example.com", "hi", "a key\r\nBcc: x")]:  # fmt: skip
        with pytest.raises(oncelog.InvalidPayload) as raised:
            send(to, subject, "x", idempotency_key=key)
        assert classify(raised.value) is Failure.REFUSED


def test_the_finder_finds_the_sent_message_and_only_it(mail: MailSystem) -> None:
    sent = sender(mail, archive=USER)("ada@example.com", "hi", "x", idempotency_key=KEY + "ff")
    assert sent["message_id"] == message_id_for(KEY + "ff", "shop.example", SECRET)
    finder = MailFinder(archive(mail), domain="shop.example", sees_its_tool=True,
                        delivery_delay=timedelta(seconds=0.3), poll=0.1, secret=SECRET)  # fmt: skip
    assert finder(KEY + "ff", "ada@example.com", "hi", "x") == oncelog.Found(sent)
    # IMAP matches substrings of headers: a key that is the start of another is not it.
    assert finder(KEY, "ada@example.com", "hi", "x") is oncelog.NOT_FOUND


def test_the_finder_cannot_tell_without_proof(mail: MailSystem) -> None:
    apart = MailFinder(
        archive(mail), delivery_delay=timedelta(seconds=0.2), poll=0.1, secret=SECRET
    )
    assert apart(KEY, "ada@example.com") is oncelog.CANNOT_TELL  # not declared with its tool
    no_delay = MailFinder(archive(mail), sees_its_tool=True, secret=SECRET)
    assert no_delay(KEY, "ada@example.com") is oncelog.CANNOT_TELL  # no bound on delivery
    locked_out = MailFinder(archive(mail, password="wrong"), sees_its_tool=True,
                            delivery_delay=timedelta(0), secret=SECRET)  # fmt: skip
    assert locked_out(KEY, "ada@example.com") is oncelog.CANNOT_TELL
    missing = MailFinder(archive(mail, "NoSuchFolder"), sees_its_tool=True,
                         delivery_delay=timedelta(0), secret=SECRET)  # fmt: skip
    assert missing(KEY, "ada@example.com") is oncelog.CANNOT_TELL
    mail.stop_imap()
    assert no_delay(KEY, "ada@example.com") is oncelog.CANNOT_TELL


def test_the_appended_copy_is_found_but_proves_no_absence(mail: MailSystem) -> None:
    with imaplib.IMAP4("127.0.0.1", mail.imap_port) as imap:
        imap.login(USER, PASSWORD)
        imap.create("Sent")
    sent_folder = archive(mail, "Sent")
    send = sender(mail, save_to=sent_folder)
    sent = send("ada@example.com", "hi", "x", idempotency_key=KEY)
    finder = MailFinder(sent_folder, domain="shop.example", sees_its_tool=True, secret=SECRET)
    assert finder(KEY, "ada@example.com") == oncelog.Found(sent)
    assert finder(KEY + "00", "ada@example.com") is oncelog.CANNOT_TELL
    with pytest.raises(oncelog.ConfigurationError, match="appends to after sending"):
        mail_tool(name="send", sender=send,
                  finder=MailFinder(sent_folder, delivery_delay=timedelta(seconds=1),
                                    secret=SECRET))  # fmt: skip


def test_a_failed_append_does_not_fail_a_sent_message(mail: MailSystem) -> None:
    send = sender(mail, save_to=archive(mail, "NoSuchFolder"))
    assert send("ada@example.com", "hi", "x", idempotency_key=KEY)["to"] == ["ada@example.com"]
    assert len(mail.with_key(KEY)) == 1


def test_an_error_while_quitting_is_in_doubt(mail: MailSystem) -> None:
    """``with SMTP(...)`` quits after the message was accepted: an error answer to QUIT
    there is no refusal of the message, and the sender's own quit raises nothing."""
    with (
        pytest.raises(smtplib.SMTPResponseException) as raised,
        smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=1) as smtp,
    ):
        smtp.sendmail("agent@shop.example", [REFUSED_QUIT], b"Subject: a\r\n\r\nx\r\n")
    assert smtp_failures.classify(raised.value) is Failure.IN_DOUBT
    sent = sender(mail, timeout=1)(REFUSED_QUIT, "hi", "x", idempotency_key=KEY)
    assert sent["to"] == [REFUSED_QUIT]
    assert len(mail.with_key(KEY)) == 1
