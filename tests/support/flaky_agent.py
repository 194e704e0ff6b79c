"""Run ``tests/attack_agents/flaky.py`` to its end, killed at a crash point if asked, and
read the tries file its tool writes: what reached the provider, and when."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .launch import environment, run_python

FLAKY = Path(__file__).parents[1] / "attack_agents" / "flaky.py"


@dataclass(frozen=True)
class Try:
    at: float  # the agent's clock when the tool was entered
    key: str


def flaky(
    store_url: str, tries: Path, *options: str, crash_at: str | None = None, **env: str
) -> tuple[int, str]:
    """One start of the agent on run ``r``, with ``env`` added to its environment: its
    exit code and what it wrote."""
    done = run_python(FLAKY, store_url, "r", tries, *options, env=environment(crash_at, **env))
    return done.returncode, done.stdout + done.stderr


def tries_made(tries: Path) -> list[Try]:
    lines = tries.read_text().splitlines() if tries.exists() else []
    return [Try(float(at), key) for at, key in (line.split() for line in lines)]
