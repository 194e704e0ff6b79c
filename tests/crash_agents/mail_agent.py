"""An agent that sends one email through ``oncelog.probes.mail``, for the mail tests to
kill and restart.

    python tests/crash_agents/mail_agent.py --ledger L --run R --smtp-port N --imap-port N
        [--delivery-delay S | --no-finder] [--kill-file FILE] [--to ADDRESS] [--timeout S]
        [--once-for S]

One run: a read, then the effect ``email`` (a ``mail_tool`` sending to a customer with the
archive address as Bcc; its finder searches the archive's mailbox over IMAP), then a read.
It prints the email's result as one JSON line and exits through ``oncelog.run_main`` (0
completed, 3 a person must act). ``--kill-file``: its pid is written there before the
send, for the SMTP server to kill it after storing the message and before answering.
``--once-for``: the email's subject is its recipient, claimed for that long (a digest
each period).
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta
from pathlib import Path

import oncelog
from oncelog.probes.mail import ImapMailbox, MailFinder, MailSender, SmtpServer, mail_tool

ARCHIVE = "archive@shop.example"
PASSWORD = "archive-secret"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="an oncelog agent that sends an email")
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--smtp-port", type=int, required=True)
    parser.add_argument("--imap-port", type=int, required=True)
    parser.add_argument("--delivery-delay", type=float, default=None)
    parser.add_argument("--no-finder", action="store_true")
    parser.add_argument("--kill-file", type=Path, default=None)
    parser.add_argument("--to", default="ada@example.com")
    parser.add_argument("--timeout", type=float, default=10.0, help="SMTP's, in seconds")
    parser.add_argument("--once-for", type=float, default=None)
    return parser.parse_args()


def declare(args: argparse.Namespace) -> oncelog.Tool[..., dict[str, object]]:
    smtp = SmtpServer("127.0.0.1", args.smtp_port, security="none", timeout=args.timeout)
    archive = ImapMailbox("127.0.0.1", ARCHIVE, PASSWORD, port=args.imap_port,
                          security="none", timeout=10)  # fmt: skip
    delay = None if args.delivery_delay is None else timedelta(seconds=args.delivery_delay)
    finder = None if args.no_finder else MailFinder(archive, delivery_delay=delay, poll=0.1)
    sender = MailSender(smtp, "agent@shop.example", archive=ARCHIVE)
    if args.once_for is None:
        return mail_tool(name="send_email", sender=sender, finder=finder)
    return mail_tool(name="send_email", sender=sender, finder=finder,
                     once_per=lambda to, subject, body: ("digest", to),
                     once_for=args.once_for)  # fmt: skip


def agent(args: argparse.Namespace) -> None:
    send = declare(args)
    with oncelog.open(args.ledger) as ledger, ledger.run(args.run) as run:
        customer = run.read("lookup", lambda: {"email": args.to, "name": "Ada"})
        if args.kill_file is not None:
            args.kill_file.write_text(str(os.getpid()))
        sent = run.effect("email", send, customer["email"], f"Refund for {args.run}",
                          f"Dear {customer['name']}, your refund is on its way.")  # fmt: skip
        run.read("after", lambda: "done")
    print(json.dumps(sent, sort_keys=True), flush=True)


if __name__ == "__main__":
    cli = parse()
    oncelog.run_main(lambda: agent(cli))
