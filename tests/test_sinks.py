"""Shipping the journal to sinks: real agent processes, a real HTTP endpoint that is down
and then up, a shipper SIGKILLed mid-batch, real syslog receivers, a file on the side,
and PostgreSQL transactions that commit out of id order.

What is shipped is checked against ``oncelog export``: every line arrives, none is lost;
a line may arrive twice only when the shipper died before the sink's answer came back.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

import oncelog
from oncelog import metrics
from oncelog.audit._signing import new_key_pair
from oncelog.audit._verify import verify
from oncelog.cli import cli
from oncelog.records._chain import GENESIS, link
from oncelog.sinks import FileSink, HttpSink, Shipper, SinkUnavailable, SyslogSink

from .support.launch import PYTHON, python
from .support.operator_commands import oncelog_cli
from .test_journal_chain import fill, intruder, rewrite_chain

CLERK = Path(__file__).parent / "sink_agents" / "clerk.py"
TIMEOUT = 30.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.02)


def exported(url: str) -> list[str]:
    return oncelog_cli(url, "export").splitlines()


def file_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Receiver:
    """An HTTP endpoint keeping each batch POSTed to it. It answers with ``answers`` in
    turn (then 200), and can hold batch number ``hold_at`` unanswered until released."""

    def __init__(self, port: int = 0, answers: tuple[int, ...] = (), hold_at: int = 0) -> None:
        self.batches: list[list[str]] = []
        self.holding, self.release = threading.Event(), threading.Event()
        answer = iter(answers)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.headers["Content-Type"] == "application/x-ndjson"
                receiver.batches.append(body.decode().splitlines())
                if len(receiver.batches) == hold_at:
                    receiver.holding.set()
                    receiver.release.wait(TIMEOUT)
                status = next(answer, 200)
                self.send_response(status)
                if status == 302:
                    self.send_header("Location", "/elsewhere")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        class QuietServer(ThreadingHTTPServer):
            def handle_error(self, *args: object) -> None:
                pass  # the client was killed before its answer: that is the point

        self.server = QuietServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ingest"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def lines(self) -> list[str]:
        return [line for batch in list(self.batches) for line in batch]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def signing_key(tmp_path: Path) -> tuple[Path, Path]:
    return new_key_pair(tmp_path / "keys")


def test_agents_never_wait_for_a_sink_that_is_down_and_nothing_is_lost(
    db_path: str, tmp_path: Path, signing_key: tuple[Path, Path]
) -> None:
    port, log = free_port(), tmp_path / "ship.log"
    ship = [
        PYTHON, "-m", "oncelog", "ship", "--db", db_path, "--state",
        str(tmp_path / "ship.state"), "--to", f"http://127.0.0.1:{port}/ingest",
        "--poll", "0.05", "--batch", "4", "--max-backoff", "0.2",
    ]  # fmt: skip
    with log.open("a") as stderr:
        shipper = subprocess.Popen(ship, stderr=stderr)
        env = {**os.environ, "ONCELOG_SIGNING_KEY": str(signing_key[0])}
        agents = [
            subprocess.Popen(python(str(CLERK), db_path, f"ticket-{n}", "5"), env=env)
            for n in range(3)
        ]
        assert [agent.wait(TIMEOUT) for agent in agents] == [0, 0, 0]  # the sink is down
        wait_for(lambda: "unavailable" in log.read_text(), "the shipper to find the sink down")
        receiver = Receiver(port, hold_at=3)  # the sink comes up
        try:
            assert receiver.holding.wait(TIMEOUT)
            shipper.kill()  # its third batch was received but never answered
            shipper.wait(TIMEOUT)
            in_flight = receiver.batches[2]
            receiver.release.set()
            shipper = subprocess.Popen(ship, stderr=stderr)  # from its state file
            expected = exported(db_path)
            wait_for(lambda: set(expected) <= set(receiver.lines()), "every line to arrive")
            shipper.terminate()
            assert shipper.wait(TIMEOUT) == 0
        finally:
            shipper.kill()
            receiver.close()
    assert sum('"type": "checkpoint"' in line for line in expected) == 3
    received = Counter(receiver.lines())
    assert set(received) == set(expected)
    twice = [line for line, times in received.items() if times > 1]
    assert set(twice) <= set(in_flight), "only the batch in flight when it died comes again"
    assert sum(received.values()) - len(received) <= len(in_flight)
    assert "shipping to http again after" in log.read_text()


def test_a_shipper_thread_follows_the_journal_on_both_stores(
    store_url: str, tmp_path: Path
) -> None:
    copy = tmp_path / "elsewhere" / "journal.jsonl"
    copy.parent.mkdir()
    with oncelog.open(store_url) as ledger:
        shipper = Shipper(ledger, FileSink(copy), tmp_path / "ship.state", poll=0.02).start()
        try:
            fill(ledger)
            expected = exported(store_url)
            wait_for(lambda: set(expected) <= set(file_lines(copy)), "the file to catch up")
        finally:
            shipper.stop()
    assert sorted(file_lines(copy)) == sorted(expected)  # each line once
    assert (shipper.shipped, shipper.failures, shipper.lag) == (len(expected), 0, 0)


def test_a_copy_shipped_to_a_file_catches_a_cut_tail(
    db_path: str, tmp_path: Path, signing_key: tuple[Path, Path]
) -> None:
    private, public = signing_key
    with oncelog.open(db_path, signing_key=private) as ledger:
        fill(ledger)
    copy, state = tmp_path / "elsewhere.jsonl", tmp_path / "ship.state"
    shipped = oncelog_cli(db_path, "ship", "--to", f"file:{copy}", "--state", str(state), "--once")
    assert shipped.strip() == f"shipped {len(exported(db_path))} lines to file"
    with intruder(db_path) as db:
        rewrite_chain(db, "r1", keep=4)
        db.execute("DELETE FROM checkpoints WHERE run_id = 'r1'")
    alone = oncelog_cli(db_path, "verify", "--public-key", str(public))
    assert alone.strip().endswith(": ok"), "nothing left beside the ledger can tell"
    against = subprocess.run(
        [PYTHON, "-m", "oncelog", "verify", "--db", db_path, "--public-key", str(public),
         "--against", str(copy)],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert against.returncode == 1
    assert "PROBLEM truncated" in against.stdout


def test_a_line_torn_by_a_crash_is_cut_before_the_next_append(tmp_path: Path) -> None:
    copy = tmp_path / "journal.jsonl"
    copy.write_text('{"type": "record", "id": 1}\n{"type": "record", "id": 2, "da')
    FileSink(copy).send(['{"type": "record", "id": 2}', '{"type": "record", "id": 3}'])
    assert [json.loads(line)["id"] for line in file_lines(copy)] == [1, 2, 3]


class SyslogReceiver:
    """A syslog receiver on a real socket: UDP, TCP (octet-counted frames) or unix."""

    def __init__(self, transport: str, folder: Path) -> None:
        self.transport = transport
        if transport == "unix":
            self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.socket.bind(str(folder / "log.sock"))
            self.address = f"unix:{folder / 'log.sock'}"
        else:
            kind = socket.SOCK_DGRAM if transport == "udp" else socket.SOCK_STREAM
            self.socket = socket.socket(socket.AF_INET, kind)
            self.socket.bind(("127.0.0.1", 0))
            self.address = f"{transport}://127.0.0.1:{self.socket.getsockname()[1]}"
        if transport == "tcp":
            self.socket.listen()
        self.socket.settimeout(TIMEOUT)

    def messages(self, count: int) -> list[str]:
        if self.transport != "tcp":
            return [self.socket.recv(1 << 16).decode() for _ in range(count)]
        connection, _ = self.socket.accept()
        connection.settimeout(TIMEOUT)
        found = []
        with connection, connection.makefile("rb") as stream:
            for _ in range(count):  # each frame: its length in digits, a space, the message
                length = b""
                while (char := stream.read(1)) not in (b" ", b""):
                    length += char
                found.append(stream.read(int(length)).decode())
        return found


SYSLOG = re.compile(r"<14>1 (\S+)Z \S+ oncelog (\d+) (record|checkpoint) - (.*)", re.S)


@pytest.mark.parametrize("transport", ["udp", "tcp", "unix"])
def test_syslog_receivers_get_one_message_per_line(
    db_path: str, tmp_path: Path, transport: str
) -> None:
    receiver = SyslogReceiver(transport, tmp_path)
    with oncelog.open(db_path) as ledger:

        @ledger.tool(kind="read", name="fetch")
        def fetch(size: int, *, idempotency_key: str) -> str:
            return "x" * size

        with ledger.run("syslog-run") as run:
            run.effect("small", fetch, 10)
            run.effect("large", fetch, 20_000)  # past what a syslog message carries
        expected = {json.loads(line)["id"]: json.loads(line) for line in exported(db_path)}
        sink = SyslogSink(receiver.address)
        try:
            with Shipper(ledger, sink, tmp_path / "ship.state") as shipper:
                assert shipper.ship_once() == len(expected)
            messages = receiver.messages(len(expected))
        finally:
            sink.close()
            receiver.socket.close()
    got = {}
    for message in messages:
        match = SYSLOG.fullmatch(message)
        assert match, message
        line = json.loads(match.group(4))
        assert int(match.group(2)) == os.getpid()
        assert match.group(1).startswith(time.strftime("%Y-", time.gmtime(line["at"])))
        got[line["id"]] = line
    assert got.keys() == expected.keys()
    omitted = [ident for ident, line in got.items() if line != expected[ident]]
    assert len(omitted) == 1  # the large result's outcome, without its data, its hash kept
    (shortened,) = (got[ident] for ident in omitted)
    assert shortened["data"] is None
    assert shortened["data_omitted"] > 20_000
    assert {**shortened, "data": expected[omitted[0]]["data"]} == {
        **expected[omitted[0]],
        "data_omitted": shortened["data_omitted"],
    }


def insert_record(connection: object, run_id: str) -> int:
    """A journal record written in ``connection``'s open transaction, chained as the first
    of its run; its id."""
    at = time.time()
    row = connection.execute(  # type: ignore[attr-defined]
        "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (%s, NULL, 'note', "
        "'{}', %s, %s) RETURNING id",
        (run_id, at, link(GENESIS, run_id, None, "note", "{}", at)),
    ).fetchone()
    return int(row[0])


def shipped_ids(path: Path) -> list[int]:
    return sorted(json.loads(line)["id"] for line in file_lines(path) if '"record"' in line)


def note(ledger: oncelog.Ledger, run_id: str) -> None:
    @ledger.tool(kind="create", name="note")
    def write(n: int, *, idempotency_key: str) -> int:
        return n

    with ledger.run(run_id) as run:
        run.effect("one", write, 1)


def test_postgres_a_lower_id_committed_last_is_still_shipped(pg_url: str, tmp_path: Path) -> None:
    import psycopg

    copy = tmp_path / "journal.jsonl"
    with (
        oncelog.open(pg_url) as ledger,
        Shipper(ledger, FileSink(copy), tmp_path / "ship.state", settle=3600) as shipper,
    ):
        with psycopg.connect(pg_url) as slow:
            lower = insert_record(slow, "side")  # drawn first, not committed yet
            note(ledger, "main")  # higher ids, committed
            shipper.ship_once()
            first = shipped_ids(copy)
            assert min(first, default=lower) > lower
            slow.commit()
        assert shipper.ship_once() == 1
        assert shipped_ids(copy) == sorted([lower, *first])
        assert sorted(file_lines(copy)) == sorted(exported(pg_url))
        assert verify(ledger.store).ok


def test_postgres_a_rolled_back_id_is_passed_once_settled(pg_url: str, tmp_path: Path) -> None:
    import psycopg

    state = tmp_path / "ship.state"
    with oncelog.open(pg_url) as ledger:
        with psycopg.connect(pg_url) as aborted:
            gap = insert_record(aborted, "side")
            aborted.rollback()
        note(ledger, "main")
        with Shipper(ledger, FileSink(tmp_path / "a.jsonl"), state, settle=3600) as waiting:
            waiting.ship_once()
        position = json.loads(state.read_text())["records"]
        assert position["low"] == gap - 1, "the gap may still fill"
        assert position["above"]
        with Shipper(ledger, FileSink(tmp_path / "b.jsonl"), state, settle=0) as settled:
            assert settled.ship_once() == 0
    position = json.loads(state.read_text())["records"]
    assert position == {"low": max(shipped_ids(tmp_path / "a.jsonl")), "above": []}


def test_a_refused_batch_is_counted_kept_and_sent_again(db_path: str, tmp_path: Path) -> None:
    receiver = Receiver(answers=(503, 302))
    registry = CollectorRegistry()
    try:
        with (
            oncelog.open(db_path) as ledger,
            Shipper(ledger, HttpSink(receiver.url), tmp_path / "ship.state") as shipper,
        ):
            note(ledger, "r")
            lines = exported(db_path)
            metrics.watch_shipper(shipper, registry)
            for answer in ("503", "302"):
                with pytest.raises(SinkUnavailable, match=answer):
                    shipper.ship_once()
            assert shipper.lag == len(lines)
            assert shipper.ship_once() == len(lines)
    finally:
        receiver.close()
    assert receiver.batches == [lines] * 3
    samples = {
        name: registry.get_sample_value(name, {"sink": "http"})
        for name in ("oncelog_sink_shipped_total", "oncelog_sink_failures_total",
                     "oncelog_sink_lag_records")
    }  # fmt: skip
    assert samples == {
        "oncelog_sink_shipped_total": len(lines),
        "oncelog_sink_failures_total": 2,
        "oncelog_sink_lag_records": 0,
    }
    with pytest.raises(oncelog.ConfigurationError, match="watched already"):
        metrics.watch_shipper(shipper, registry)


def test_one_shipper_per_state_file_and_bad_input_is_refused(db_path: str, tmp_path: Path) -> None:
    state = tmp_path / "ship.state"
    with oncelog.open(db_path) as ledger, Shipper(ledger, FileSink(tmp_path / "a"), state):
        with pytest.raises(oncelog.ConfigurationError, match="another shipper"):
            Shipper(ledger, FileSink(tmp_path / "b"), state)
        (tmp_path / "bad.state").write_text("{}")
        with pytest.raises(oncelog.ConfigurationError, match="not a shipper's state file"):
            Shipper(ledger, FileSink(tmp_path / "b"), tmp_path / "bad.state")
    runner = CliRunner()
    for args, message in (
        (["--to", "ftp://host/x"], "unknown sink"),
        (["--to", "syslog:udp://host"], "udp://HOST:PORT"),
        (["--to", "http://h/x", "--header", "no colon"], "NAME: VALUE"),
    ):
        result = runner.invoke(cli, ["ship", "--db", db_path, "--state", str(state), *args])
        assert result.exit_code == 2, result.output
        assert message in result.output
