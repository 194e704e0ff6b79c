"""What the services recorded, read from their own files in a scenario's folder: what
happened in the world, whatever the agent or its ledger believe.

- ``tickets.db``: the help desk's SQLite file;
- ``mail/``: the SMTP server's Maildir, one file per message it accepted;
- ``stripe-charges.json``: the charges localstripe listed through the Stripe API just
  before it was stopped (it keeps its state in memory).
"""

from __future__ import annotations

import json
import mailbox
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

CHARGES_FILE = "stripe-charges.json"


@dataclass(frozen=True)
class Counts:
    tickets: int
    emails: int
    charges: int


def tickets(folder: Path) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(f"file:{folder / 'tickets.db'}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute("SELECT * FROM tickets ORDER BY id")]


def emails(folder: Path) -> list[Message]:
    box = mailbox.Maildir(folder / "mail", create=False)
    return [box.get_message(key) for key in sorted(box.keys())]


def email_with_id(folder: Path, message_id: str) -> Message | None:
    found = [message for message in emails(folder) if message["Message-ID"] == message_id]
    return found[0] if found else None


def save_charges(folder: Path, charges: list[dict[str, Any]]) -> None:
    (folder / CHARGES_FILE).write_text(json.dumps(charges, indent=2, sort_keys=True) + "\n")


def charges(folder: Path) -> list[dict[str, Any]]:
    saved: list[dict[str, Any]] = json.loads((folder / CHARGES_FILE).read_text())
    return saved


def counts(folder: Path) -> Counts:
    return Counts(len(tickets(folder)), len(emails(folder)), len(charges(folder)))
