"""The value classes an ``open()`` imports (``records/_value.py``) behave as the frozen
dataclasses they replaced, for oncelog's code and for a user's: constructor, equality,
hash, repr, immutability, ``__post_init__`` and ``dataclasses``' own functions. And an
open no longer imports ``dataclasses`` at all, read from a fresh interpreter."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

import oncelog
from oncelog.records._value import Value, as_dict, field_names, replace

from .support.launch import python


class Point(Value):
    x: int
    y: int = 0
    label: str | None = None


class Keyword(Value, kw_only=True):
    mode: str = "stop"


class Both(Keyword):
    steps: int | None = None


@dataclasses.dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 0
    label: str | None = None


def test_a_value_is_made_compared_hashed_and_shown_as_a_frozen_dataclass() -> None:
    made, same = Point(1, label="a"), Point(x=1, y=0, label="a")
    assert made == same
    assert hash(made) == hash(same)
    assert made != Point(2)
    assert repr(made) == repr(DataPoint(1, label="a")).replace("DataPoint", "Point")
    assert made != DataPoint(1, label="a")  # only its own class is equal to it
    with pytest.raises(AttributeError):
        made.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del made.x
    for wrong in ((), (1, 2, "a", 4)):
        with pytest.raises(TypeError):
            Point(*wrong)
    with pytest.raises(TypeError):
        Point(1, x=1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point(1, z=1)  # type: ignore[call-arg]


def test_keyword_only_fields_come_after_the_positional_ones_as_in_dataclasses() -> None:
    assert field_names(Both) == ("steps", "mode")
    assert Both(3) == Both(steps=3, mode="stop")
    with pytest.raises(TypeError):
        Both(3, "pause")  # type: ignore[call-arg]


def test_dataclasses_functions_work_on_values() -> None:
    made = Point(1, 2, "a")
    assert dataclasses.is_dataclass(made)
    assert [f.name for f in dataclasses.fields(made)] == ["x", "y", "label"]
    assert dataclasses.replace(made, y=5) == replace(made, y=5) == Point(1, 5, "a")
    assert dataclasses.asdict(made) == as_dict(made) == {"x": 1, "y": 2, "label": "a"}
    assert dataclasses.astuple(made) == (1, 2, "a")


def test_a_budget_is_still_checked_when_made_and_when_replaced() -> None:
    budget = oncelog.Budget(steps=3.0, on_exceed="pause")  # type: ignore[arg-type]
    assert budget.steps == 3
    assert isinstance(budget.steps, int)  # __post_init__ ran
    assert oncelog.Budget.from_json(budget.to_json()) == budget
    with pytest.raises(oncelog.ConfigurationError):
        dataclasses.replace(budget, on_exceed="explode")  # type: ignore[arg-type]
    with pytest.raises(oncelog.ConfigurationError):
        replace(budget, steps=-1)


def test_open_imports_no_dataclasses(tmp_path: Path) -> None:
    code = (
        "import json, sys\nimport oncelog\noncelog.open(sys.argv[1]).close()\n"
        "print(json.dumps(sorted(m for m in ('dataclasses', 'inspect', 'oncelog.runtime._effects')"
        " if m in sys.modules)))"
    )
    done = subprocess.run(
        python("-c", code, str(tmp_path / "ledger.db")), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
