"""The hot path's constructors of the store interface's records make what the classes'
own constructors make."""

from __future__ import annotations

import dataclasses

import pytest

from oncelog import StepState, StepType
from oncelog.stores import NewStep, Outcome
from oncelog.stores._protocol import new_outcome, new_step, timed_step


def test_new_step_is_the_frozen_dataclass_its_constructor_makes() -> None:
    values = (3, "s", StepType.EFFECT, "tool", "create", "ol1_k", "h", "{}", True, 2.5, True, 0.25)
    made = new_step(*values)
    expected = NewStep(*values)
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    # every field, by its own name; a subject is added by ``replace`` (rarely: once_per)
    assert dataclasses.astuple(made) == (*values, None, None, None, ())
    assert dataclasses.replace(made, needs_approval=False).needs_approval is False
    with pytest.raises(AttributeError):
        made.cost = 1.0  # type: ignore[misc]


def test_a_timed_step_is_the_step_replaced_with_its_time() -> None:
    values = (3, "s", StepType.LLM, "tool", "llm", "ol1_k", "h", "{}", False, 0.0, False, 0.0)
    original = new_step(*values)
    made = timed_step(original, 1.5)
    expected = dataclasses.replace(NewStep(*values), elapsed=1.5)
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    assert dataclasses.astuple(made) == (*values[:-1], 1.5, None, None, None, ())
    assert original == NewStep(*values)  # the step it was made from is unchanged
    with pytest.raises(AttributeError):
        made.elapsed = 2.0  # type: ignore[misc]


def test_outcome_is_the_frozen_dataclass_its_constructor_makes() -> None:
    values = (StepState.NOT_DONE, None, '{"type":"x"}', 1, 2, 0.5, 99.0)
    made = new_outcome(*values)
    expected = Outcome(*values)
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    assert dataclasses.astuple(made) == values
    with pytest.raises(AttributeError):
        made.cost = 1.0  # type: ignore[misc]
