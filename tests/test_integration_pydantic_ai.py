"""PydanticAI, for real: an agent with a guarded FunctionToolset and a FunctionModel, in a
process SIGKILLed right after a tool's outcome was recorded and restarted. The restarted
agent runs again from the top in the same run: recorded model responses and tool results
come back without calls, and each effect happened once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import oncelog
from oncelog import StepState

from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import require_framework, run_agent


def test_agent_killed_after_an_effect_resumes_and_finishes(tmp_path: Path) -> None:
    require_framework("pydantic_ai", "pydantic-ai")
    log = EffectLog(tmp_path / "effects.jsonl")
    args = [
        "--ledger", str(tmp_path / "ledger.db"), "--effects", str(log.path),
        "--model-calls", str(tmp_path / "model-calls"), "--run", "ticket-4",
    ]  # fmt: skip

    killed = run_agent("pydantic_ai_agent", *args, crash_at="after_outcome_commit@send_email#1")
    assert killed.killed, killed
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1}

    resumed = run_agent("pydantic_ai_agent", *args)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line.startswith('"done: ')
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "charge": 1}
    assert len((tmp_path / "model-calls").read_text().splitlines()) == 2
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        steps = ledger.steps("ticket-4")
        assert [(s.step_id, s.state, s.attempts) for s in steps] == [
            ("model#1", StepState.DONE, 1),
            ("send_email#1", StepState.DONE, 1),
            ("charge#1", StepState.DONE, 1),
            ("model#2", StepState.DONE, 1),
        ]
