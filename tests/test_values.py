"""The value classes an ``open()`` imports (``records/_value.py``) behave as the frozen
dataclasses they replaced, for oncelog's code and for a user's: constructor, equality,
hash, repr, immutability, ``__post_init__`` and ``dataclasses``' own functions; its
``NamedTuple`` as ``typing.NamedTuple``; and a module ``_lazy.defer`` names is imported at
its first use. Read from a fresh interpreter: an open imports neither ``dataclasses`` nor
the modules the store and the ledger defer, and calls no ``compile()``."""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog._lazy import defer
from oncelog.records._value import NamedTuple, Value, as_dict, field_names, replace

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


class Pair(NamedTuple):
    """Two numbers."""

    left: int
    right: int = 0

    @property
    def total(self) -> int:
        return self.left + self.right

    def swapped(self) -> Pair:
        return Pair(self.right, self.left)


class TypingPair(typing.NamedTuple):
    """Two numbers."""

    left: int
    right: int = 0


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


class Checked(Value):
    """A value whose ``__post_init__`` counts its runs, made every way a caller can."""

    x: int
    y: int = 0
    runs: list[int] = []  # noqa: RUF012 - one shared list, to count the runs

    def __post_init__(self) -> None:
        self.runs.append(self.x)
        if self.x < 0:
            raise ValueError("x must not be negative")


def test_every_way_of_making_a_value_fills_its_defaults_and_runs_its_post_init() -> None:
    # Positional arguments with defaults after them take the short path (a lease, a run's
    # record at every run's start); it must fill and check as the general one does.
    assert Point(1) == Point(x=1) == Point(1, 0, None)
    assert (Point(1).y, Point(1).label, Point(1, 2).label) == (0, None, None)
    assert Both() == Both(mode="stop", steps=None)
    Checked.runs.clear()
    made = [Checked(1), Checked(2, 3), Checked(x=3), Checked(4, y=5)]
    assert Checked.runs == [1, 2, 3, 4]
    assert [m.y for m in made] == [0, 3, 0, 5]
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]  # x has no default
    with pytest.raises(TypeError):
        Point(1, 2, None, 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Keyword("start")  # type: ignore[call-arg]  # keyword-only


def test_a_named_tuple_is_typing_s_without_compiling_its_annotations() -> None:
    made = Pair(1, right=2)
    assert made == (1, 2) == TypingPair(1, 2)
    assert (made.total, made.swapped(), Pair(3)) == (3, Pair(2, 1), (3, 0))
    assert Pair._fields == TypingPair._fields
    assert Pair._field_defaults == TypingPair._field_defaults == {"right": 0}
    assert repr(made) == repr(TypingPair(1, 2)).replace("TypingPair", "Pair")
    assert made._replace(left=5) == (5, 2)
    assert made._asdict() == {"left": 1, "right": 2}
    assert (Pair.__doc__, Pair.__module__, Pair.__qualname__) == ("Two numbers.", __name__, "Pair")
    assert Pair.__annotations__ == {"left": "int", "right": "int"}  # as written, not compiled
    assert pickle.loads(pickle.dumps(made)) == made
    assert isinstance(made, tuple)
    with pytest.raises(AttributeError):
        made.left = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        Pair()  # type: ignore[call-arg]


def test_a_deferred_module_is_imported_at_its_first_use_and_then_stands_in_its_place() -> None:
    name = "tests.support._deferred_probe"
    sys.modules.pop(name, None)
    namespace: dict[str, Any] = {"__package__": "tests"}
    defer(namespace, probe=".support._deferred_probe")
    assert name not in sys.modules
    assert "not imported yet" in repr(namespace["probe"])
    assert namespace["probe"].ANSWER == 42
    assert namespace["probe"] is sys.modules[name]


# What an open must not import: the concerns the SQL store, a step's writes and the ledger
# reach at their first use (``_lazy``), what only a person's decision, a hold, retention, an
# export or a notice to a person uses, and ``signal`` (three enums, built when a SIGTERM
# handler or a crash point needs it).
NOT_AT_OPEN = (
    "dataclasses",
    "inspect",
    "signal",
    "oncelog.runtime._effects",
    "oncelog.stores._sql_approval_edits",
    "oncelog.stores._sql_approvals",
    "oncelog.stores._sql_contracts",
    "oncelog.stores._sql_holds",
    "oncelog.stores._sql_notices",
    "oncelog.stores._sql_prune",
    "oncelog.stores._sql_queue",
    "oncelog.stores._sql_refusals",
    "oncelog.stores._sql_resolutions",
    "oncelog.stores._sql_retries",
    "oncelog.stores._sql_subjects",
    "oncelog.stores._postgres_settings",
    "oncelog.records._retention",
    "oncelog.records._argument_edits",
    "oncelog.runtime._holds",
    "oncelog._next",
    "oncelog._person_results",
    "oncelog.audit._export",
    "oncelog.controls._notices",
    "oncelog.controls._waiting",
    "oncelog.records._display",
    "oncelog.stores._sql_runs",
    "oncelog._webhook",
    "oncelog._commands",
)
_OPEN = """
import builtins, json, sys
compiled = []
plain = builtins.compile
def counted(*args, **kwargs):
    if not sys._getframe(1).f_code.co_filename.startswith("<frozen importlib"):
        compiled.append(args[0] if args else kwargs)  # not a module without byte code
    return plain(*args, **kwargs)
builtins.compile = counted
import oncelog
oncelog.open(sys.argv[1]).close()
print(json.dumps([sorted(set(sys.argv[2:]) & set(sys.modules)), len(compiled)]))
"""


def test_open_imports_none_of_what_it_does_not_use_and_compiles_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.db")
    # The ledger exists, as at every start but the first (creating one logs where it is).
    subprocess.run(python("-c", f"import oncelog; oncelog.open({path!r}).close()"), check=True)
    done = subprocess.run(python("-c", _OPEN, path, *NOT_AT_OPEN), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported, compiled = json.loads(done.stdout.splitlines()[-1])
    assert imported == []
    # typing.NamedTuple compiles each field's annotation, and the first compile() of a
    # process builds the syntax tree's types: records/_value.NamedTuple does neither.
    assert compiled == 0
