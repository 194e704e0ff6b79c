"""The tests' SMTP server: aiosmtpd, storing every message it accepts as one file of a
Maildir (the one Dovecot serves) before it answers 250. A separate process, so what it
stored is what the world got, whatever happened to the agent.

    python tests/support/mail_server.py --maildir DIR --port N
        [--kill-file FILE] [--refuse ADDRESS] [--stall ADDRESS]

``--kill-file``: after storing a message, if FILE holds a pid, SIGKILL that process and
remove FILE, before answering: the agent dies with its message accepted and no 250 read.
``--refuse``: answer RCPT for ADDRESS with 550. ``--stall``: for a message to ADDRESS,
store it and wait 5 s before answering (a client's timeout fires inside DATA). A
session that sent a message to ``quit-refused@example.com`` gets 451 to its QUIT.
"""

from __future__ import annotations

import argparse
import asyncio
import mailbox
import os
import signal
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

REFUSED_QUIT = "quit-refused@example.com"  # a session that sent to it gets 451 to QUIT


class Store:
    def __init__(self, maildir: Path, kill_file: Path | None, refuse: str | None,
                 stall: str | None) -> None:  # fmt: skip
        self.box = mailbox.Maildir(maildir, create=False)
        self.kill_file = kill_file
        self.refuse = refuse
        self.stall = stall

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if address == self.refuse:
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.box.add(envelope.original_content)  # on the disk before the 250
        if self.kill_file is not None and self.kill_file.exists():
            os.kill(int(self.kill_file.read_text()), signal.SIGKILL)
            self.kill_file.unlink()
        if self.stall in envelope.rcpt_tos:
            await asyncio.sleep(5)
        if REFUSED_QUIT in envelope.rcpt_tos:
            session.refuse_quit = True
        return "250 OK stored"

    async def handle_QUIT(self, server: Any, session: Any, envelope: Any) -> str:
        if getattr(session, "refuse_quit", False):
            return "451 4.3.0 not now"
        return "221 Bye"


def main() -> None:
    parser = argparse.ArgumentParser(description="an SMTP server delivering into a Maildir")
    parser.add_argument("--maildir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kill-file", type=Path, default=None)
    parser.add_argument("--refuse", default=None)
    parser.add_argument("--stall", default=None)
    args = parser.parse_args()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # for sigwait
    store = Store(args.maildir, args.kill_file, args.refuse, args.stall)
    controller = Controller(store, hostname="127.0.0.1", port=args.port)
    controller.start()
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    controller.stop()


if __name__ == "__main__":
    main()
