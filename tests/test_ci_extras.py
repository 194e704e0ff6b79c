"""``.ci/extras-beside-frameworks`` knows every framework guard: a new integration without
its framework's full package there would never be installed beside it in CI."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "extras-beside-frameworks"


def script() -> ModuleType:
    if sys.version_info < (3, 11):
        pytest.skip("the script reads pyproject.toml with tomllib (Python 3.11)")
    loader = importlib.machinery.SourceFileLoader("extras_beside_frameworks", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_every_framework_guard_is_installed_beside_its_framework() -> None:
    guards = {
        p.stem for p in (ROOT / "src" / "oncelog" / "integrations").glob("*.py")
        if not p.stem.startswith("_")
    }  # fmt: skip
    checked = {module for _, module in script().FRAMEWORKS.values()}
    assert guards <= checked, guards - checked


def test_an_extra_pyproject_lacks_is_skipped_saying_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checks = script()
    monkeypatch.setattr(checks, "FRAMEWORKS", {"no-such-extra": ("no-such-package", "nothing")})
    assert checks.main([]) == 0
    assert "skip  no-such-extra: pyproject.toml defines no extra 'no-such-extra' yet" in (
        capsys.readouterr().out
    )
