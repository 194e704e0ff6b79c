"""Run an integration agent as its own process, the way a supervisor would, optionally
armed to SIGKILL itself at an oncelog crash point."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.launch import python

from ..conftest import require
from ..support.agents import AgentExit

ROOT = Path(__file__).parents[2]
TIMEOUT = 120.0  # a hung agent is a failure, not a reason to hang the suite


# Frameworks whose tests run in a virtualenv of their own, named by .ci/run: crewai pins
# mcp<2 and openai<3, strands-agents mcp<2.2, which the dev virtualenv cannot hold
# (.ci/crewai, .ci/strands).
ELSEWHERE = "ONCELOG_TESTED_ELSEWHERE"
# Each such framework's own way in: its extra installed here would downgrade mcp and openai.
OWN_VIRTUALENV = {
    "crewai": ".ci/crewai install, then .ci/crewai test",
    "strands": ".ci/strands install, then .ci/strands test",
}


def require_framework(module: str, extra: str) -> None:
    found = importlib.util.find_spec(module) is not None
    if not found and extra in os.environ.get(ELSEWHERE, "").split(","):
        where = f".ci/{extra}"
        pytest.skip(f"{extra} is tested in a virtualenv of its own ({where}, ${ELSEWHERE})")
    own = OWN_VIRTUALENV.get(extra)
    if own is not None:
        require(found, f"{extra} is tested in a virtualenv of its own: {own}")
    require(found, f"pip install '.[{extra}]'")


def run_agent(module: str, *args: str, crash_at: str | None = None) -> AgentExit:
    """``python -m tests.integration_agents.MODULE ARGS`` from the repository root."""
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_CRASH_AT"}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # offline: no traces sent anywhere
    env["CREWAI_DISABLE_TELEMETRY"] = env["OTEL_SDK_DISABLED"] = "true"
    env["CREWAI_TRACING_ENABLED"] = "false"
    if crash_at is not None:
        env["ONCELOG_CRASH_AT"] = crash_at
    argv = python("-m", f"tests.integration_agents.{module}", *args)
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    return AgentExit(done.returncode, done.stdout, done.stderr)
