"""The OpenAI Agents SDK, for real: an agent with two guarded function tools and the SDK's
own ScriptedModel, in a process SIGKILLed right after a tool returned (before its outcome
was recorded) and restarted. The restarted agent runs again from the top in the same run:
the recorded model response comes back without a model call, the effect in doubt is found
by its probe, and each effect happened once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import oncelog
from oncelog import StepState

from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import require_framework, run_agent


def test_agent_killed_after_a_tool_call_resumes_and_finishes(tmp_path: Path) -> None:
    require_framework("agents", "openai-agents")
    log = EffectLog(tmp_path / "effects.jsonl")
    args = [
        "--ledger", str(tmp_path / "ledger.db"), "--effects", str(log.path),
        "--model-calls", str(tmp_path / "model-calls"), "--run", "ticket-3",
    ]  # fmt: skip

    killed = run_agent("openai_agents_agent", *args, crash_at="after_call@charge#1")
    assert killed.killed, killed
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "charge": 1}

    resumed = run_agent("openai_agents_agent", *args)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line.startswith('"done: ')
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "charge": 1}
    assert len((tmp_path / "model-calls").read_text().splitlines()) == 2
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        steps = ledger.steps("ticket-3")
        assert [(s.step_id, s.state) for s in steps] == [
            ("model#1", StepState.DONE),
            ("send_email#1", StepState.DONE),
            ("charge#1", StepState.DONE),
            ("model#2", StepState.DONE),
        ]
        assert steps[0].tokens_in == 40
