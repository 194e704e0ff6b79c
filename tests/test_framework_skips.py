"""The line that skips a framework's tests says how to run them: for CrewAI and Strands,
their own virtualenvs (``.ci/crewai``, ``.ci/strands``), never their extras installed into
the dev one, where their pins would quietly downgrade mcp and openai."""

from __future__ import annotations

import importlib.util

import pytest

from .integration_agents.processes import ELSEWHERE, require_framework


@pytest.mark.parametrize(("module", "extra"), [("crewai", "crewai"), ("strands", "strands")])
def test_the_skip_points_at_its_own_virtualenv(
    monkeypatch: pytest.MonkeyPatch, module: str, extra: str
) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here: its tests run, nothing is skipped")
    monkeypatch.delenv(ELSEWHERE, raising=False)
    with pytest.raises((pytest.skip.Exception, pytest.fail.Exception)) as told:
        require_framework(module, extra)
    assert f".ci/{extra} install" in str(told.value)
    assert "pip install" not in str(told.value)
