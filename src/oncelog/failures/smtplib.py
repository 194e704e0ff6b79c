"""Failures of the standard library's ``smtplib`` (imported only if the program already did).

SMTP takes no idempotency key: a server has a message once it answered the end of its data
with 250, and nothing before that reply can have sent it. So the rule is where the error
arose, read from its traceback, and what the server answered:

- raised inside ``SMTP.data`` (the DATA command, the message's lines, the reply to their
  end): an ``SMTPDataError`` is the server's answer that it did not take the message, 5xx
  refused, 4xx not performed; anything else there (a timeout, a reset, a closed
  connection while the data went out or while its reply was awaited): in doubt, the
  server may have taken it and the reply was lost.
- raised before any ``SMTP.data`` ran, through smtplib, ``socket`` and ``ssl`` frames only
  (connecting, the greeting, EHLO, STARTTLS, AUTH, MAIL, RCPT): not sent. A reply code
  of 5xx (``SMTPSenderRefused``, ``SMTPAuthenticationError``, every recipient of
  ``SMTPRecipientsRefused``) is refused, any other answer (4xx, a refused connection, a
  name not resolved, a timeout, a dropped connection) not performed.
- raised while the session ended (``quit``, ``with SMTP(...)``'s exit): in doubt, the
  message may have been accepted before.
- a shape it does not know (code of someone else's between smtplib and the error, or a
  traceback that passed through no smtplib frame): None, for OSErrors that are smtplib's
  own classes in doubt.

It judges one message per call: a tool that sends two on one connection has two effects,
and a refused second send says nothing of the first.
"""

from __future__ import annotations

import sys

from . import Failure
from ._sends import called, frames_from, only_in

_DATA = ("smtplib", "data")
# Ending a session: after a message, for all the traceback says; ``with SMTP(...)`` quits
# on its way out, after the message was accepted.
_ENDING = {("smtplib", "quit"), ("smtplib", "__exit__"), ("smtplib", "close")}


def classify(exc: BaseException) -> Failure | None:
    smtplib = sys.modules.get("smtplib")
    if smtplib is None or not isinstance(exc, OSError):  # SMTPException is an OSError
        return None
    frames = frames_from(exc, "smtplib")
    if not frames:
        return Failure.IN_DOUBT if isinstance(exc, smtplib.SMTPException) else None
    calls = called(frames)
    if _ENDING.intersection(calls):
        return Failure.IN_DOUBT
    if _DATA in calls:
        if isinstance(exc, smtplib.SMTPDataError) and only_in(frames, "smtplib"):
            return by_reply(exc.smtp_code, Failure.IN_DOUBT)
        return Failure.IN_DOUBT
    if not only_in(frames, "smtplib", "socket", "ssl"):
        return Failure.IN_DOUBT
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return refused_recipients(exc.recipients)
    if isinstance(exc, smtplib.SMTPResponseException):
        return by_reply(exc.smtp_code, Failure.NOT_PERFORMED)
    return Failure.NOT_PERFORMED


def by_reply(code: int, otherwise: Failure) -> Failure:
    """A server's reply refusing a command: 5xx permanent, 4xx try again later; any other
    code is no refusal and means ``otherwise``."""
    if 500 <= code < 600:
        return Failure.REFUSED
    if 400 <= code < 500:
        return Failure.NOT_PERFORMED
    return otherwise


def refused_recipients(recipients: dict[str, tuple[int, bytes]]) -> Failure:
    """Recipients refused before DATA: refused if every refusal was permanent."""
    permanent = all(500 <= code < 600 for code, _ in recipients.values())
    return Failure.REFUSED if recipients and permanent else Failure.NOT_PERFORMED
