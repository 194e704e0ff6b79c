"""Run ``tests/crash_agents/http_agent.py`` as a subprocess, and kill it when asked.

Every call waits for the child and reaps it, whatever happens, so no zombie is left and
the next ``ledger.run`` of the same run id sees a dead owner at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .launch import environment, python

AGENT_SCRIPT = Path(__file__).parents[1] / "crash_agents" / "http_agent.py"
AGENT_TIMEOUT = 60.0  # a hung agent is a failure, not a reason to hang the suite


@dataclass(frozen=True)
class AgentSetup:
    """What stays the same across the restarts of one run."""

    ledger: Path
    run_id: str
    provider_url: str
    kinds: tuple[str, ...] = ("create", "create", "create")
    tool_sleep: float = 0.0
    probe: bool = False  # payment tools declare a probe that asks the provider
    preflight: bool = False  # every tool asks the provider before each attempt
    dedupe_window: float | None = None  # the provider is declared to deduplicate keys
    retry: int | None = None  # every tool retries what was not performed, this many times
    backoff: float = 0.1
    tries: Path | None = None  # a file the tools append each attempt's key to

    @property
    def effect_steps(self) -> list[str]:
        """The agent's effect step ids, in order (``http_agent.effect_ids``)."""
        return [f"effect-{n}" for n in range(1, len(self.kinds) + 1)]

    def kind_of(self, step_id: str) -> str:
        return self.kinds[self.effect_steps.index(step_id)]

    def argv(self, kill_before_answer: str | None) -> list[str]:
        argv = python(str(AGENT_SCRIPT), "--ledger", str(self.ledger))
        argv += ["--run", self.run_id, "--provider", self.provider_url]
        argv += ["--kinds", ",".join(self.kinds), "--tool-sleep", str(self.tool_sleep)]
        if kill_before_answer is not None:
            argv += ["--kill-before-answer", kill_before_answer]
        if self.probe:
            argv.append("--probe")
        if self.preflight:
            argv.append("--preflight")
        if self.dedupe_window is not None:
            argv += ["--dedupe-window", str(self.dedupe_window)]
        if self.retry is not None:
            argv += ["--retry", str(self.retry), "--backoff", str(self.backoff)]
        if self.tries is not None:
            argv += ["--tries", str(self.tries)]
        return argv


@dataclass(frozen=True)
class AgentExit:
    returncode: int
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def last_line(self) -> str:
        lines = self.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    def results(self) -> dict[str, Any]:
        """The effects' results the agent printed when its run completed."""
        assert self.last_line, f"the agent printed no results: {self}"
        found: dict[str, Any] = json.loads(self.last_line)
        return found

    def __str__(self) -> str:
        return f"exit {self.returncode}; stdout {self.stdout!r}; stderr {self.stderr[-3000:]!r}"


def run_agent(
    setup: AgentSetup,
    *,
    crash_at: str | None = None,
    kill_before_answer: str | None = None,
    kill_after: float | None = None,
) -> AgentExit:
    """Run the agent once. ``crash_at`` arms ``ONCELOG_CRASH_AT``; ``kill_before_answer``
    has the provider kill it; ``kill_after`` SIGKILLs it from here after that many
    seconds if it is still running."""
    env = environment(crash_at)
    process = subprocess.Popen(
        setup.argv(kill_before_answer),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    with process:
        try:
            stdout, stderr = process.communicate(timeout=kill_after or AGENT_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            if kill_after is None:
                raise AssertionError(f"the agent hung: {stderr[-2000:]}") from None
    return AgentExit(process.returncode, stdout, stderr)
