"""The line that skips a framework's tests says how to run them: for CrewAI, its own
virtualenv (``.ci/crewai``), never its extra installed into the dev one, where crewai's
pins would quietly downgrade mcp and openai."""

from __future__ import annotations

import importlib.util

import pytest

from .integration_agents.processes import ELSEWHERE, require_framework


def test_the_crewai_skip_points_at_its_own_virtualenv(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("crewai") is not None:
        pytest.skip("crewai is installed here: its tests run, nothing is skipped")
    monkeypatch.delenv(ELSEWHERE, raising=False)
    with pytest.raises((pytest.skip.Exception, pytest.fail.Exception)) as told:
        require_framework("crewai", "crewai")
    assert ".ci/crewai install" in str(told.value)
    assert "pip install" not in str(told.value)
