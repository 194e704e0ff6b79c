"""The demo's ticket service: a small help desk over HTTP, with its own SQLite file.

    python -m oncelog.showcases.demo.tickets DB [--honour-idempotency-key]

It listens on 127.0.0.1, on a port the kernel picks, and prints that port as its first
line once the socket listens. Like many real ticket systems it does not deduplicate:
two ``POST /tickets`` make two tickets, whatever ``Idempotency-Key`` they carry, unless
it is started with ``--honour-idempotency-key`` (then a repeated key answers with the
ticket it made first). Every write is committed before the answer is sent, so the file
says what the service did, whatever happens to its clients.

    POST  /tickets                {"requester", "subject", "body"} -> the ticket
    GET   /tickets?requester=...  -> {"data": [tickets]}
    GET   /tickets/ID             -> the ticket, with its comments
    PATCH /tickets/ID             {"status"?, "payment"?} -> the ticket
    POST  /tickets/ID/comments    {"body"} -> the comment
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY,
    requester TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    payment TEXT,
    idempotency_key TEXT,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE TABLE IF NOT EXISTS comments (
    id INTEGER PRIMARY KEY,
    ticket_id INTEGER NOT NULL REFERENCES tickets (id),
    body TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
"""
EDITABLE = ("status", "payment")


class NotFound(Exception):
    pass


class HelpDesk:
    """The tickets in one SQLite file; one writer at a time, each write committed."""

    def __init__(self, path: Path, *, honour_keys: bool) -> None:
        self.path = path
        self.honour_keys = honour_keys
        self._lock = threading.Lock()
        with self._db() as db:
            db.executescript(SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._lock, closing(sqlite3.connect(self.path)) as db, db:
            db.row_factory = sqlite3.Row
            yield db

    def open_ticket(self, fields: dict[str, Any], key: str | None) -> dict[str, Any]:
        with self._db() as db:
            if key and self.honour_keys:
                first = db.execute("SELECT id FROM tickets WHERE idempotency_key = ?", (key,))
                row = first.fetchone()
                if row is not None:
                    return _ticket(db, row["id"])
            cur = db.execute(
                "INSERT INTO tickets (requester, subject, body, idempotency_key) "
                "VALUES (?, ?, ?, ?)",
                (str(fields["requester"]), str(fields["subject"]), str(fields["body"]), key),
            )
            return _ticket(db, int(cur.lastrowid or 0))

    def tickets_of(self, requester: str) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id FROM tickets WHERE requester = ? ORDER BY id", (requester,)
            )
            return [_ticket(db, row["id"]) for row in rows.fetchall()]

    def ticket(self, ticket_id: int) -> dict[str, Any]:
        with self._db() as db:
            return _ticket(db, ticket_id)

    def update(self, ticket_id: int, fields: dict[str, Any]) -> dict[str, Any]:
        with self._db() as db:
            _ticket(db, ticket_id)
            for name in EDITABLE:
                if name in fields:
                    db.execute(
                        f"UPDATE tickets SET {name} = ? WHERE id = ?", (fields[name], ticket_id)
                    )
            return _ticket(db, ticket_id)

    def comment(self, ticket_id: int, body: str) -> dict[str, Any]:
        with self._db() as db:
            _ticket(db, ticket_id)
            cur = db.execute(
                "INSERT INTO comments (ticket_id, body) VALUES (?, ?)", (ticket_id, body)
            )
            return {"id": cur.lastrowid, "ticket_id": ticket_id, "body": body}


def _ticket(db: sqlite3.Connection, ticket_id: int) -> dict[str, Any]:
    row = db.execute("SELECT * FROM tickets WHERE id = ?", (ticket_id,)).fetchone()
    if row is None:
        raise NotFound(f"no ticket {ticket_id}")
    comments = db.execute(
        "SELECT id, body FROM comments WHERE ticket_id = ? ORDER BY id", (ticket_id,)
    )
    ticket = dict(row)
    del ticket["idempotency_key"]  # the service's own business
    ticket["comments"] = [dict(comment) for comment in comments.fetchall()]
    return ticket


def _handler(desk: HelpDesk) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            if parts == ["tickets"]:
                requester = parse_qs(url.query).get("requester", [""])[0]
                self._answer(lambda: {"data": desk.tickets_of(requester)})
            elif len(parts) == 2 and parts[0] == "tickets" and parts[1].isdigit():
                self._answer(lambda: desk.ticket(int(parts[1])))
            else:
                self._send(404, {"error": "no such resource"})

        def do_POST(self) -> None:
            parts = urlparse(self.path).path.strip("/").split("/")
            body = self._body()
            if parts == ["tickets"]:
                key = self.headers.get("Idempotency-Key")
                self._answer(lambda: desk.open_ticket(body, key), created=True)
            elif len(parts) == 3 and parts[0] == "tickets" and parts[2] == "comments":
                self._answer(lambda: desk.comment(int(parts[1]), str(body["body"])), created=True)
            else:
                self._send(404, {"error": "no such resource"})

        def do_PATCH(self) -> None:
            parts = urlparse(self.path).path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "tickets" and parts[1].isdigit():
                body = self._body()
                self._answer(lambda: desk.update(int(parts[1]), body))
            else:
                self._send(404, {"error": "no such resource"})

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length", 0))
            body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
            return body

        def _answer(self, make: Any, *, created: bool = False) -> None:
            try:
                payload = make()
            except NotFound as exc:
                self._send(404, {"error": str(exc)})
            except (KeyError, ValueError) as exc:
                self._send(400, {"error": f"bad request: {exc}"})
            else:
                self._send(201 if created else 200, payload)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the SQLite file is the record

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="the oncelog demo's ticket service")
    parser.add_argument("db", type=Path, help="its SQLite file (created if missing)")
    parser.add_argument(
        "--honour-idempotency-key",
        action="store_true",
        help="answer a repeated Idempotency-Key with the first ticket instead of a new one",
    )
    args = parser.parse_args()
    desk = HelpDesk(args.db, honour_keys=args.honour_idempotency_key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(desk))
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
