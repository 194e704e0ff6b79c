"""SIGTERM to a plain agent process (``run_main(agent)``, which drains by default) in the
middle of an effect, as Kubernetes sends it: the effect's outcome is recorded, nothing new
starts, the run's lease is released, the process exits with 75, and the next process
finishes the run without doing the effect again.

The agent is the Kubernetes example, ``examples/kubernetes/agent.py``, against a help desk
served by this test, which holds its answer to the reply until the signal was sent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import oncelog

from .support.launch import python

ROOT = Path(__file__).parent.parent
AGENT = ROOT / "examples" / "kubernetes" / "agent.py"
TIMEOUT = 60.0


class Helpdesk(ThreadingHTTPServer):
    """A help desk that honours ``Idempotency-Key`` and records what it did."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Requests)
        self.replies: dict[str, dict[str, Any]] = {}  # idempotency key -> the reply
        self.closes: list[str] = []
        self.reply_entered = threading.Event()
        self.answer_reply = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Requests(BaseHTTPRequestHandler):
    server: Helpdesk

    def do_GET(self) -> None:
        self._answer({"id": "4711", "customer": "Ada"})

    def do_POST(self) -> None:
        text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["text"]
        self.server.reply_entered.set()
        self.server.answer_reply.wait(TIMEOUT)
        key = self.headers["Idempotency-Key"]
        reply = self.server.replies.setdefault(key, {"id": f"reply-{key[-6:]}", "text": text})
        self._answer(reply)

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.closes.append(self.headers["Idempotency-Key"])
        self._answer({"status": "closed"})

    def _answer(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test reads the help desk's records, not its log


@pytest.fixture
def helpdesk() -> Iterator[Helpdesk]:
    server = Helpdesk()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.answer_reply.set()
    server.shutdown()
    server.server_close()


def start_agent(helpdesk: Helpdesk, db_path: str) -> subprocess.Popen[str]:
    environment = {
        **os.environ, "JOB_NAMESPACE": "support", "JOB_NAME": "ticket-4711", "TICKET": "4711",
        "HELPDESK_URL": helpdesk.url, "ONCELOG_URL": db_path,
    }  # fmt: skip
    return subprocess.Popen(
        python(str(AGENT)), env=environment, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_sigterm_inside_an_effect_records_it_and_starts_nothing_new(
    helpdesk: Helpdesk, db_path: str
) -> None:
    agent = start_agent(helpdesk, db_path)
    assert helpdesk.reply_entered.wait(TIMEOUT), "the agent never reached the reply"
    agent.send_signal(signal.SIGTERM)  # while the help desk works on the reply
    helpdesk.answer_reply.set()
    _, stderr = agent.communicate(timeout=TIMEOUT)
    assert agent.returncode == oncelog.EXIT_TRY_LATER, stderr
    assert "Draining" in stderr
    assert len(helpdesk.replies) == 1
    assert helpdesk.closes == [], "no step started after SIGTERM"
    with oncelog.open(db_path) as ledger:
        record = ledger.get_run("support/ticket-4711")
        steps = ledger.steps("support/ticket-4711")
    assert (record.status, record.owner) == (oncelog.RunStatus.QUEUED, None), "lease released"
    assert [(s.step_id, s.state) for s in steps] == [
        ("read", oncelog.StepState.DONE), ("reply", oncelog.StepState.DONE),
    ]  # fmt: skip
    assert steps[1].result == next(iter(helpdesk.replies.values()))

    again = start_agent(helpdesk, db_path)  # the Job's next pod: same Job name, same run
    _, stderr = again.communicate(timeout=TIMEOUT)
    assert again.returncode == oncelog.EXIT_COMPLETED, stderr
    assert len(helpdesk.replies) == 1
    assert len(helpdesk.closes) == 1
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run("support/ticket-4711").status is oncelog.RunStatus.COMPLETED
        assert [s.attempts for s in ledger.steps("support/ticket-4711")] == [1, 1, 1]
