"""A fake external provider, run as its own process, that performs and counts effects.

    python tests/support/provider.py --mode honours_keys --db effects.db [--delay 0.01]

It prints ``PORT <n>`` on stdout once it listens on 127.0.0.1 (or ``--host``). Its records
live in its own SQLite file, written before it answers, so they are the truth about what
happened in the world whatever becomes of the agent that asked.

``POST /effect`` takes JSON ``{"key", "run", "payload"}`` and optionally ``"ledger"`` (the
agent's ledger file or PostgreSQL URL), ``"pid"`` and ``"kill_before_answer"``:

- mode ``honours_keys``: a second request with a key already performed returns the first
  response and performs nothing; mode ``ignores_keys``: every request performs.
- with ``ledger``, the provider reads the agent's ledger (read-only) at the instant it
  performs, and records the state of the step holding that key: invariant 1 says it must
  already be a durable ``in_flight`` intent.
- with ``kill_before_answer``, after the effect is durable the provider SIGKILLs ``pid``,
  waits for it to die and only then (fails to) answer: the window "performed, unanswered".

``GET /idle`` answers once no other request is being handled. Connections are accepted in
order, so after an agent is reaped, ``/idle`` returning means every request it sent has
been performed or dropped; the test reads the records only then.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import sqlite3
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("honours_keys", "ignores_keys")
IDLE_TIMEOUT = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run          TEXT NOT NULL,
    key          TEXT NOT NULL,
    payload      TEXT NOT NULL,
    response     TEXT NOT NULL,
    intent_state TEXT,           -- the ledger's state for this key when it was performed
    performed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    run     TEXT NOT NULL,
    key     TEXT NOT NULL,
    outcome TEXT NOT NULL,       -- performed | replayed
    killed  INTEGER NOT NULL,    -- the caller was SIGKILLed before the answer
    at      REAL NOT NULL
);
"""


class EffectStore:
    """The provider's durable records; one lock makes check-then-perform atomic."""

    def __init__(self, path: str, mode: str) -> None:
        self.mode = mode
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")
        self._db.executescript(SCHEMA)

    def perform(self, request: dict[str, Any], intent_state: str | None) -> tuple[str, str]:
        """Perform the effect (or replay it); return (outcome, response JSON)."""
        run, key = str(request["run"]), str(request["key"])
        payload = json.dumps(request.get("payload"), sort_keys=True)
        with self._lock:
            if self.mode == "honours_keys":
                row = self._db.execute(
                    "SELECT response FROM effects WHERE key = ? ORDER BY id LIMIT 1", (key,)
                ).fetchone()
                if row is not None:
                    self._log_request(run, key, "replayed", request)
                    return "replayed", str(row[0])
            self._db.execute("BEGIN IMMEDIATE")
            try:
                response = self._insert(run, key, payload, intent_state, request)
            except BaseException:
                self._db.execute("ROLLBACK")  # nothing half-performed stays behind
                raise
            self._db.execute("COMMIT")
        return "performed", response

    def _insert(
        self, run: str, key: str, payload: str, intent_state: str | None, request: dict[str, Any]
    ) -> str:
        effect_id = self._db.execute(
            "INSERT INTO effects (run, key, payload, response, intent_state, performed_at) "
            "VALUES (?, ?, ?, '', ?, ?)",
            (run, key, payload, intent_state, time.time()),
        ).lastrowid
        response = json.dumps(
            {"effect_id": effect_id, "key": key, "payload": request.get("payload")},
            sort_keys=True,
        )
        self._db.execute("UPDATE effects SET response = ? WHERE id = ?", (response, effect_id))
        self._log_request(run, key, "performed", request)
        return response

    def lookup(self, key: str) -> list[Any]:
        """The responses of the effects performed under ``key``, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT response FROM effects WHERE key = ? ORDER BY id", (key,)
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def _log_request(self, run: str, key: str, outcome: str, request: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO requests (run, key, outcome, killed, at) VALUES (?, ?, ?, ?, ?)",
            (run, key, outcome, int(bool(request.get("kill_before_answer"))), time.time()),
        )


def ledger_state(ledger_path: str | None, run: str, key: str) -> str | None:
    """The ledger's committed state of the step with ``key``, read as another process would.

    Reads the ``steps`` table directly and read-only, so the check takes no write lock and
    sees exactly what a crash at this instant would leave behind."""
    if not ledger_path:
        return None
    if ledger_path.startswith(("postgresql://", "postgres://")):
        return postgres_ledger_state(ledger_path, run, key)
    try:
        db = sqlite3.connect(f"file:{ledger_path}?mode=ro", uri=True, timeout=10.0)
        try:
            row = db.execute(
                "SELECT state FROM steps WHERE run_id = ? AND key = ?", (run, key)
            ).fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"error: {exc}"
    return None if row is None else str(row[0])


# How long the provider looks at a PostgreSQL ledger before it answers without knowing: a
# server frozen (SIGSTOP) after the connection was made would hold the query for ever, and
# the agent waiting on this answer with it.
LOOK_SECONDS = 5.0


def postgres_ledger_state(url: str, run: str, key: str) -> str | None:
    """The same, from a PostgreSQL ledger: committed rows only, as any other session. The
    look runs in a thread of its own, given up after ``LOOK_SECONDS``: ``connect_timeout``
    bounds only the connecting, and a frozen server accepts the query's packets without
    ever answering them."""
    import psycopg

    answer: list[str | None] = []

    def look() -> None:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as db:
                row = db.execute(
                    "SELECT state FROM steps WHERE run_id = %s AND key = %s", (run, key)
                ).fetchone()
            answer.append(None if row is None else str(row[0]))
        except psycopg.Error as exc:
            answer.append(f"error: {exc}")

    looking = threading.Thread(target=look, name="ledger look", daemon=True)
    looking.start()
    looking.join(LOOK_SECONDS)
    return answer[0] if answer else f"error: no answer from the ledger in {LOOK_SECONDS:g} s"


def kill_and_wait(pid: int) -> None:
    """SIGKILL ``pid`` and return once it is dead (a pidfd avoids hitting a reused pid)."""
    if not hasattr(os, "pidfd_open"):
        os.kill(pid, signal.SIGKILL)  # a SIGKILLed process runs no more user code
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already gone
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        select.select([fd], [], [], 10.0)  # readable once the process has exited
    finally:
        os.close(fd)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: EffectStore, delay: float, host: str = "127.0.0.1") -> None:
        super().__init__((host, 0), Handler)
        self.store = store
        self.delay = delay
        self.busy = threading.Condition()
        self.in_progress = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        # Counted at accept time, in accept order, so /idle cannot overtake a request
        # that reached the provider before it.
        with self.busy:
            self.in_progress += 1
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.busy:
                self.in_progress -= 1
                self.busy.notify_all()

    def wait_idle(self) -> bool:
        with self.busy:
            return self.busy.wait_for(lambda: self.in_progress <= 1, IDLE_TIMEOUT)


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the test output

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/effects":  # what a probe asks: the effects done under a key
            key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
            self._answer(200, {"found": self.server.store.lookup(key)})
            return
        if url.path != "/idle":
            self._answer(404, {"error": "not found"})
            return
        idle = self.server.wait_idle()
        self._answer(200 if idle else 503, {"idle": idle})

    def do_POST(self) -> None:
        if self.path != "/effect":
            self._answer(404, {"error": "not found"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length))
            run, key = str(request["run"]), str(request["key"])
        except (ValueError, KeyError, TypeError, OSError):
            # A caller killed mid-send leaves a truncated request: nothing is performed.
            self._answer(400, {"error": "bad request"})
            return
        time.sleep(self.server.delay)  # slow enough that random kills land in this window
        intent = ledger_state(request.get("ledger"), run, key)
        _, response = self.server.store.perform(request, intent)
        time.sleep(self.server.delay)  # ... and in the "performed, not yet answered" one
        if request.get("kill_before_answer") and request.get("pid"):
            kill_and_wait(int(request["pid"]))
        self._answer(200, json.loads(response))

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        # The caller may be dead (killed by us, or by the test): nobody hears the answer.
        with contextlib.suppress(OSError):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake provider that counts effects.")
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--db", required=True, help="SQLite file for the effect records")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before/after effect")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    args = parser.parse_args(argv)
    server = Server(EffectStore(args.db, args.mode), args.delay, args.host)
    print(f"PORT {server.server_address[1]}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
