"""The simulator (tests/simulation/, docs/simulation.md) in CI: a fixed number of schedules
from fixed seeds, judged by its oracle, with the rate printed; and the simulator run on
sabotaged copies of the engine, which it must catch within the same kind of budget."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from oncelog.failures import Failure as CallFailure
from oncelog.runtime import _calls, _effects, _outcomes, _subjects
from oncelog.stores import _sql_subjects

from .simulation.driver import play
from .simulation.explore import Report, explore
from .simulation.known import KNOWN
from .simulation.oracle import check
from .simulation.schedule import Agent, Call, Declaration, Schedule

SEEDS = range(0, 150)  # the fixed budget: about 10 s on an idle core
SABOTAGE_SEEDS = range(1000, 1200)  # searched in order until the first unexplained finding


def _reported(report: Report, capsys: pytest.CaptureFixture[str], what: str) -> None:
    with capsys.disabled():  # in the CI log whatever the capture: the rate is the point
        print(f"\nsimulation ({what}): {report.summary()}")


def test_schedules_from_fixed_seeds_keep_every_invariant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = explore(SEEDS, KNOWN, max_shrinks=1)
    _reported(report, capsys, "fixed seeds")
    assert report.schedules == len(SEEDS)
    failures = "\n\n".join(
        f"seed {failure.seed}: {failure.unexplained}\n{failure.reproduction}"
        for failure in report.unexplained
    )
    assert not report.unexplained, failures


def _first_unexplained(capsys: pytest.CaptureFixture[str], what: str) -> Report:
    """Seeds in order until one fails in a way no known bug explains (none shrunk)."""
    report = Report()
    for seed in SABOTAGE_SEEDS:
        found = explore(range(seed, seed + 1), KNOWN, max_shrinks=0)
        report.schedules += 1
        report.seconds += found.seconds
        report.failures += found.failures
        if found.unexplained:
            break
    _reported(report, capsys, what)
    return report


@pytest.fixture
def in_doubt_taken_for_not_performed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every failed call classified "certainly not performed", whatever it was."""
    monkeypatch.setattr(_outcomes, "failure_of", lambda spec, exc: CallFailure.NOT_PERFORMED)


@pytest.fixture
def keys_made_per_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key the engine derives is new (a key from an attempt count, which the design
    forbids): a resend or a probe after a crash names another effect. (A done step run again
    is no sabotage this harness can reach: the store's transition guards refuse its intent.)"""
    made = itertools.count()

    def per_attempt(derive: Any) -> Any:
        return lambda *args, **kwargs: f"{derive(*args, **kwargs)}-{next(made)}"

    monkeypatch.setattr(_effects, "idempotency_key", per_attempt(_calls.idempotency_key))
    monkeypatch.setattr(_effects, "subject_key", per_attempt(_subjects.subject_key))


@pytest.fixture
def subjects_never_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An intent takes no claim on its subject."""
    monkeypatch.setattr(_sql_subjects, "claim", lambda tx, lease, step: None)


@pytest.mark.parametrize(
    "sabotage",
    ["in_doubt_taken_for_not_performed", "keys_made_per_attempt", "subjects_never_claimed"],
)
def test_the_simulator_catches_a_sabotaged_engine(
    sabotage: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    request.getfixturevalue(sabotage)
    report = _first_unexplained(capsys, sabotage)
    assert report.unexplained, f"{report.schedules} schedules missed the sabotage"


def test_issue_41_item_1_a_period_is_not_settled_by_the_last_one() -> None:
    """Seed 242, shrunk, as the simulator printed it on the code before the fix: period
    1's refund was recorded done, found by a preflight under period 0's key, and never
    performed (``lost``)."""
    schedule = Schedule(
        seed=242,
        declaration=Declaration(
            kind="upsert",
            subject=True,
            periodic=True,
            repeat_error=False,
            probe="marker",
            preflight=True,
            dedupe=300.0,
            declare_window=True,
            failures=True,
            retry=3,
            approval="none",
            lag=3.0,
            consistent=False,
        ),
        agents=(
            Agent(
                run_id="run-1",
                agent="billing",
                period=0,
                calls=(Call(step="s1", item=("refund", 42), amount=250),),
            ),
            Agent(
                run_id="run-0",
                agent="support",
                period=1,
                calls=(Call(step="s0", item=("refund", 42), amount=250),),
            ),
        ),
        faults=(),
        crashes=(),
        ticks=(),
        decisions=(),
    )
    assert check(play(schedule)) == []


def test_issue_41_item_2_equal_numbers_are_one_subject() -> None:
    """Seed 7, shrunk, as the simulator printed it on the code before the fix: 42.0 and
    42 claimed two subjects and the refund was performed under two keys (``twice``)."""
    schedule = Schedule(
        seed=7,
        declaration=Declaration(
            kind="create",
            subject=True,
            periodic=True,
            repeat_error=False,
            probe="raising",
            preflight=False,
            dedupe=0.0,
            declare_window=False,
            failures=True,
            retry=0,
            approval="none",
            lag=0.0,
            consistent=False,
        ),
        agents=(
            Agent(
                run_id="run-0",
                agent="support",
                period=0,
                calls=(Call(step="s0", item=("refund", 42.0), amount=250),),
            ),
            Agent(
                run_id="run-3",
                agent="billing",
                period=0,
                calls=(Call(step="s0", item=("refund", 42), amount=250),),
            ),
        ),
        faults=(),
        crashes=(),
        ticks=(),
        decisions=(),
    )
    assert check(play(schedule)) == []
