"""Start the agent's command as a supervisor would: a new process each time, told its run
id and its ledger through the environment, in a session of its own so that a hung one
can be killed with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from oncelog.testing import CRASH_ENV

from . import counting
from .errors import NotTestable

RUN_ID_ENV = "ONCELOG_RUN_ID"
URL_ENV = "ONCELOG_URL"
RUN_ID_PLACEHOLDER = "{run_id}"  # in the command's arguments, replaced by the trial's run id
# SIGKILL as Popen reports it, or as a shell between us and the agent reports it.
KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)


@dataclass(frozen=True)
class Exit:
    """How one process of the agent ended; ``code`` is None when it was killed for taking
    longer than the timeout."""

    code: int | None
    log: Path

    @property
    def killed(self) -> bool:
        return self.code in KILLED

    def tail(self, lines: int = 12) -> str:
        """The end of what the process printed, to explain a failure."""
        text = self.log.read_text(encoding="utf-8", errors="replace").rstrip()
        return "\n".join(text.splitlines()[-lines:]) if text else "(it printed nothing)"


@dataclass(frozen=True)
class Agent:
    command: tuple[str, ...]
    timeout: float
    # A shell command run before each trial, to put the services the agent changes back
    # as they were (empty a test mailbox, drop a sandbox's records); None: nothing to do.
    reset_command: str | None = None
    # A shell command printing how many effects the provider has performed so far: a
    # number, or a JSON object of counts per tool; None: effects are counted from the ledger.
    count_command: str | None = None

    def reset(self, run_id: str, ledger: Path, log: Path) -> None:
        """Run the reset command for the trial about to start; refuse to go on if it fails,
        as trials on services left as the last one made them would prove nothing."""
        if self.reset_command is None:
            return
        ended = self._run(["/bin/sh", "-c", self.reset_command], run_id, ledger, log)
        if ended.code != 0:
            happened = "took longer than --timeout" if ended.code is None else f"exit {ended.code}"
            raise NotTestable(
                f"the --reset command failed ({happened}): {self.reset_command}\n{ended.tail()}"
            )

    def count(self, run_id: str, ledger: Path, log: Path) -> dict[str, int] | None:
        """What the provider says it has performed so far (see ``counting``), or None
        without a count command."""
        if self.count_command is None:
            return None
        ended = self._run(["/bin/sh", "-c", self.count_command], run_id, ledger, log)
        if ended.code != 0:
            happened = "took longer than --timeout" if ended.code is None else f"exit {ended.code}"
            raise NotTestable(
                f"the --count command failed ({happened}): {self.count_command}\n{ended.tail()}"
            )
        return counting.parse(log.read_text(encoding="utf-8", errors="replace"), self.count_command)

    def start(self, run_id: str, ledger: Path, log: Path, crash_at: str | None = None) -> Exit:
        """Run one process to its end; ``crash_at`` arms a crash point in it only."""
        argv = [arg.replace(RUN_ID_PLACEHOLDER, run_id) for arg in self.command]
        return self._run(argv, run_id, ledger, log, crash_at)

    def _run(
        self, argv: list[str], run_id: str, ledger: Path, log: Path, crash_at: str | None = None
    ) -> Exit:
        env = {name: value for name, value in os.environ.items() if name != CRASH_ENV}
        env.update({URL_ENV: str(ledger), RUN_ID_ENV: run_id})
        if crash_at is not None:
            env[CRASH_ENV] = crash_at
        with log.open("w", encoding="utf-8") as out:
            process = _popen(argv, out, env)
        try:
            return Exit(process.wait(timeout=self.timeout), log)
        except subprocess.TimeoutExpired:
            _kill(process)
            return Exit(None, log)
        except BaseException:  # Ctrl-C: leave nothing of the agent running
            _kill(process)
            raise


def _popen(argv: Sequence[str], out: IO[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise NotTestable(f"cannot start {argv[0]!r}: {exc}") from exc


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group the agent leads (it was started in its own session)."""
    with suppress(ProcessLookupError):  # it ended on its own meanwhile
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
