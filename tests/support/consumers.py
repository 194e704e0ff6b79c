"""``oncelog consume`` processes started against one ledger, and what the world saw.

The handler (``tests/queue_agents/handlers.py``) calls a provider that honours idempotency
keys and keeps its own records in a directory: ``performed-<key>`` once per effect that
really happened, ``requests.log`` with every request that reached it, ``handled.log`` with
every call of the handler, and ``entered-<step>`` naming the process inside that call.
Each consumer's log (its stderr) is a file, read while it runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from .launch import PYTHON

ROOT = Path(__file__).parent.parent.parent
HANDLER = "tests.queue_agents.handlers:handle"
TIMEOUT = 60.0


class Consumers:
    def __init__(self, db_path: str, directory: Path, broker: list[str]) -> None:
        self.db_path = db_path
        self.provider = directory / "provider"
        self.provider.mkdir()
        self.directory = directory
        self.broker = broker  # "rabbitmq" or "jetstream", then its options
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *options: str, handler: str = HANDLER) -> subprocess.Popen[str]:
        log = (self.directory / f"consumer-{len(self.started)}.log").open("w")
        with log:
            consumer = subprocess.Popen(
                [PYTHON, "-m", "oncelog", "consume", *self.broker, handler,
                 "--db", self.db_path, "--retry-delay", "0.2", *options],
                cwd=ROOT, env=self._environment(), stdout=subprocess.DEVNULL, stderr=log,
                text=True,
            )  # fmt: skip
        self.started.append(consumer)
        return consumer

    def run_worker(self, *options: str) -> None:
        """``oncelog worker`` with the same handler, until no run is left for it."""
        subprocess.run(
            [PYTHON, "-m", "oncelog", "worker", HANDLER, "--db", self.db_path,
             "--until-idle", *options],
            cwd=ROOT, env=self._environment(), check=True, timeout=TIMEOUT, capture_output=True,
        )  # fmt: skip

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "WORKER_PROVIDER": str(self.provider)}

    def log(self, consumer: subprocess.Popen[str]) -> str:
        return (self.directory / f"consumer-{self.started.index(consumer)}.log").read_text()

    def wait_log(self, consumer: subprocess.Popen[str], text: str, count: int = 1) -> None:
        """Until ``text`` appears ``count`` times in the consumer's log."""
        deadline = time.monotonic() + TIMEOUT
        while self.log(consumer).count(text) < count:
            assert consumer.poll() is None, f"the consumer exited:\n{self.log(consumer)}"
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.log(consumer)}"
            time.sleep(0.02)

    def stop(self, consumer: subprocess.Popen[str]) -> int:
        """SIGTERM, then its exit code."""
        consumer.send_signal(signal.SIGTERM)
        return consumer.wait(timeout=TIMEOUT)

    def kill(self, consumer: subprocess.Popen[str]) -> None:
        consumer.kill()
        consumer.wait(timeout=TIMEOUT)

    def wait_entered(self, step: str) -> int:
        """The pid of the consumer inside the provider call for ``step``."""
        marker = self.provider / f"entered-{step}"
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline, f"no consumer reached {step}"
            time.sleep(0.01)
        return int(marker.read_text())

    def performed(self) -> dict[str, int]:
        """Effects that really happened (once per key): step -> pid that performed it."""
        found = [path.read_text().split() for path in self.provider.glob("performed-*")]
        return {step: int(pid) for pid, step in found}

    def requests(self) -> list[str]:
        """The idempotency key of every request that reached the provider."""
        return self._second_fields("requests.log")

    def handled(self) -> list[str]:
        """The run id of every call of the handler."""
        return self._second_fields("handled.log")

    def _second_fields(self, name: str) -> list[str]:
        """What follows the pid on each line of the provider's log ``name``."""
        path = self.provider / name
        lines = path.read_text().splitlines() if path.exists() else []
        return [line.split()[1] for line in lines]

    def close(self) -> None:
        for consumer in self.started:
            if consumer.poll() is None:
                consumer.kill()
            consumer.wait(timeout=TIMEOUT)
