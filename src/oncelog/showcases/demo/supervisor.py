"""Restart the agent until it completes, as Kubernetes restarts an evicted pod: a new
process each time, with the same arguments and so the same run id."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import oncelog
from oncelog.testing import CRASH_ENV

from . import DemoFailed
from .services import Processes, stop
from .support_agent import KILL_AFTER_ENV

AGENT_TIMEOUT = 60.0
MAX_PROCESSES = 6


@dataclass(frozen=True)
class Death:
    """How one process of the agent is made to die: the environment that arms the kill,
    and when it strikes, in words."""

    env: dict[str, str]
    when: str


@dataclass
class Supervisor:
    argv: list[str]
    logs: Path
    processes: Processes
    say: Callable[[str], None]
    deaths: tuple[Death, ...] = ()
    on_halt: Callable[[], None] = field(default=lambda: None)

    def run_until_completed(self) -> int:
        """Start the agent, again after each death or halt; the number of processes."""
        for number in range(1, MAX_PROCESSES + 1):
            death = self.deaths[number - 1] if number <= len(self.deaths) else None
            code, log = self._start(number, death)
            if code == 0:
                self.say(f"  completed process {number}: all steps done (exit 0)")
                return number
            if code == -signal.SIGKILL and death is not None:
                self.say(
                    f"  killed    process {number} (SIGKILL) at {_last_step(log)}, {death.when}"
                )
            elif code == oncelog.EXIT_HALTED:
                self.say(f"  halted    process {number} (exit 3): a person must decide")
                self.on_halt()
            else:
                raise DemoFailed(f"process {number} ended with exit code {code}; see {log}")
        raise DemoFailed(f"the agent did not complete in {MAX_PROCESSES} processes")

    def _start(self, number: int, death: Death | None) -> tuple[int, Path]:
        env = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, KILL_AFTER_ENV)}
        env.update(death.env if death is not None else {})
        log = self.logs / f"agent-{number}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.processes.add(f"agent process {number}", process)
        verb = "started  " if number == 1 else "restarted"
        self.say(f"  {verb} process {number} (pid {process.pid})")
        try:
            code = process.wait(timeout=AGENT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise DemoFailed(f"process {number} hung; see {log}") from None
        finally:
            stop(process)
        return code, log


def _last_step(log: Path) -> str:
    """The step the agent announced last before it died."""
    steps = re.findall(r"^step (\S+) (\S+)$", log.read_text(), re.M)
    return "step {} {}".format(*steps[-1]) if steps else "its start"
