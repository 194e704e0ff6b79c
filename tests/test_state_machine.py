"""The effect lifecycle as a model, checked against the ledger by hypothesis.

A ``RuleBasedStateMachine`` drives one run through random sessions: the agent code is
started (replaying everything recorded so far), calls new effects of every kind whose
provider succeeds, refuses, raises or is "killed" after acting, finishes or is killed
between steps, and people resolve what is in doubt. After every rule the provider's own
call counts, ``ledger.steps``, the run's status and the journal are compared with the
model, and ``verify`` must find every table in agreement with the journal. A kill here is
simulated in-process (a ``BaseException`` the ledger does not catch, then
``oncelog.testing.abandon``); the kill tests do it with real SIGKILLs.
"""

from __future__ import annotations

import contextvars
import shutil
import sqlite3
import tempfile
from collections import Counter, deque
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import oncelog
from oncelog import Resolution, RunStatus, StepState
from oncelog.audit._verify import verify
from oncelog.testing import FakeProvider, Refused, abandon

RUN_ID = "ticket-4711"
KINDS = ("read", "upsert", "create", "payment", "destructive")
IDEMPOTENT_KINDS = frozenset({"read", "upsert"})
IN_DOUBT = frozenset({StepState.IN_FLIGHT, StepState.UNKNOWN})

Behaviour = Literal["succeed", "refuse", "raise", "kill"]
BEHAVIOURS: tuple[Behaviour, ...] = ("succeed", "refuse", "raise", "kill")


class SimulatedKill(BaseException):
    """The process dies right after the provider acted: no ledger code runs after it."""


class ConnectionReset(Exception):
    """An unexpected error: the provider may or may not have acted."""


class ModelViolation(BaseException):
    """Raised inside a tool: a BaseException, so the ledger cannot record it as the
    tool's own failure and the test fails where the violation happened."""


@dataclass
class ModelStep:
    """What the model believes about one recorded position."""

    position: int
    step_id: str
    kind: str
    positional: bool  # called as ``tool(...)`` rather than ``run.effect(step_id, ...)``
    key: str
    state: StepState | None = None  # None: never asked for yet
    intents: int = 0
    result: Any = None  # what replay must hand back when ``done``

    @property
    def label(self) -> str:
        return f"p{self.position}"

    @property
    def idempotent(self) -> bool:
        return self.kind in IDEMPOTENT_KINDS

    def may_run(self) -> bool:
        """Whether a visit is allowed to call the provider (invariant 3)."""
        if self.state is None or self.state is StepState.NOT_DONE:
            return True
        return self.state in IN_DOUBT and self.idempotent


@dataclass
class Session:
    """One process running the agent code: its ``with`` block entered, not yet left."""

    context: AbstractContextManager[oncelog.Run]
    run: oncelog.Run
    vars: contextvars.Context  # the block's own context, so ``current_run`` never leaks


class EffectLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="oncelog-sm-"))
        db_path = str(self.folder / "ledger.db")
        self.ledger = oncelog.open(db_path)
        self.observer = sqlite3.connect(db_path)  # sees only what is durable
        # Honours no key: every call it receives acts, so a second call is seen.
        self.provider = FakeProvider(key_ttl=0)
        self.script: deque[Behaviour] = deque()  # how the next live calls go
        self.last: Behaviour | None = None
        self.tools = {kind: self._declare(kind) for kind in KINDS}
        self.program: list[ModelStep] = []
        self.not_done_resolutions: Counter[str] = Counter()
        self.status: RunStatus | None = None
        self.session: Session | None = None
        self.visiting: ModelStep | None = None
        self.seen_journal: list[oncelog.JournalEntry] = []

    def _declare(self, kind: str) -> oncelog.Tool[..., dict[str, Any]]:
        def call_provider(step: str, *, idempotency_key: str) -> dict[str, Any]:
            self._before_provider_acts(idempotency_key)
            self.last = self.script.popleft() if self.script else "succeed"
            if self.last == "refuse":
                self.provider.fail_next("refuse")
            elif self.last == "raise":
                self.provider.fail_next("before", ConnectionReset("reset by peer"))
            elif self.last == "kill":
                self.provider.fail_next("after", SimulatedKill())
            answer: dict[str, Any] = self.provider.call(idempotency_key, step)
            return answer

        tool: oncelog.Tool[..., dict[str, Any]] = self.ledger.tool(
            kind=oncelog.Kind(kind),
            name=f"tool_{kind}",
            refusals=(Refused,),
            approval=False,  # this machine models the lifecycle; approvals: test_approvals
        )(call_provider)
        return tool

    def _before_provider_acts(self, key: str) -> None:
        step = self.visiting
        if step is None or step.key != key:
            raise ModelViolation(f"the provider got key {key} while visiting {step}")
        if not step.may_run():
            raise ModelViolation(f"{step.step_id} in state {step.state} re-ran silently")
        # Invariant 1: the intent of this very attempt is durable before the call.
        row = self.observer.execute(
            "SELECT state, attempts FROM steps WHERE run_id = ? AND seq = ?",
            (RUN_ID, step.position),
        ).fetchone()
        if row != ("in_flight", step.intents + 1):
            raise ModelViolation(f"{step.step_id} called with durable row {row}")

    def teardown(self) -> None:
        if self.session is not None:
            abandon(self.session.run)
        self.observer.close()
        self.ledger.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- rules --------------------------------------------------------------------------

    @initialize()
    def first_start(self) -> None:
        self.start_agent([])

    @precondition(lambda self: self.session is None)
    @rule(script=st.lists(st.sampled_from(BEHAVIOURS), max_size=3))
    def start_agent(self, script: list[Behaviour]) -> None:
        """A process (re)starts the agent code from the top: everything recorded replays;
        ``script`` is how the provider behaves on the live re-executions replay makes."""
        context = self.ledger.run(RUN_ID)
        variables = contextvars.copy_context()
        run = variables.run(context.__enter__)
        self.session = Session(context, run, variables)
        # Entering a run makes it running again, completed or not; only a halt stays.
        self.status = RunStatus.HALTED if self.status is RunStatus.HALTED else RunStatus.RUNNING
        self.script = deque(script)
        for step in self.program:
            if not self._visit(step):
                break
        self.script.clear()

    @precondition(lambda self: self.session is not None)
    @rule(
        kind=st.sampled_from(KINDS), behaviour=st.sampled_from(BEHAVIOURS), positional=st.booleans()
    )
    def call_new_effect(self, kind: str, behaviour: Behaviour, positional: bool) -> None:
        position = len(self.program)
        tool = self.tools[kind]
        step_id = f"{tool.spec.name}@{position}" if positional else f"s{position}"
        key = oncelog.idempotency_key(RUN_ID, step_id, tool.spec.name)
        step = ModelStep(position, step_id, kind, positional, key)
        self.program.append(step)
        self.script = deque([behaviour])
        self._visit(step)

    @precondition(lambda self: self.session is not None)
    @rule()
    def agent_returns(self) -> None:
        session = self._end_session()
        session.vars.run(session.context.__exit__, None, None, None)
        self.status = RunStatus.COMPLETED

    @precondition(lambda self: self.session is not None)
    @rule()
    def killed_between_steps(self) -> None:
        abandon(self._end_session().run)

    @precondition(
        lambda self: self.session is None and any(s.state in IN_DOUBT for s in self.program)
    )
    @rule(data=st.data(), resolution=st.sampled_from(Resolution))
    def person_resolves(self, data: st.DataObject, resolution: Resolution) -> None:
        step = data.draw(st.sampled_from([s for s in self.program if s.state in IN_DOUBT]))
        result = {"resolved": step.key} if resolution is Resolution.DONE else None
        record = self.ledger.resolve(
            RUN_ID,
            step.step_id,
            resolution,
            by="alice",
            result=result,
        )
        step.state = {
            Resolution.DONE: StepState.DONE,
            Resolution.NOT_DONE: StepState.NOT_DONE,
            Resolution.ABANDON: StepState.ABANDONED,
        }[resolution]
        step.result = result
        assert record.state is step.state
        if resolution is Resolution.NOT_DONE:
            self.not_done_resolutions[step.key] += 1
        if self.status is RunStatus.HALTED and not any(
            s.state is StepState.UNKNOWN for s in self.program
        ):
            self.status = RunStatus.QUEUED  # released by the person's decision

    @precondition(lambda self: any(s.state not in IN_DOUBT | {None} for s in self.program))
    @rule(data=st.data(), resolution=st.sampled_from(Resolution))
    def person_resolves_a_settled_step(self, data: st.DataObject, resolution: Resolution) -> None:
        """Refused without a trace, even while an agent holds the run."""
        settled = [s for s in self.program if s.state is not None and s.state not in IN_DOUBT]
        step = data.draw(st.sampled_from(settled))
        with pytest.raises(oncelog.InvalidResolution) as refused:
            self.ledger.resolve(
                RUN_ID,
                step.step_id,
                resolution,
                by="mallory",
            )
        assert (refused.value.run_id, refused.value.step_id) == (RUN_ID, step.step_id)

    # -- one visit of one position ------------------------------------------------------

    def _end_session(self) -> Session:
        session, self.session = self.session, None
        assert session is not None
        return session

    def _visit(self, step: ModelStep) -> bool:
        """Ask for ``step`` as the agent code does; check what happened against the model;
        return whether the session goes on."""
        session = self.session
        assert session is not None
        runs = step.may_run()
        calls_before = self.provider.requests.count(step.key)
        self.visiting = step
        try:
            value: Any = self._ask(session, step)
        except (SimulatedKill, oncelog.OnceLogError, ConnectionReset) as exc:
            value = exc
        finally:
            self.visiting = None
        assert self.provider.requests.count(step.key) - calls_before == (1 if runs else 0)
        event(f"{step.kind} {'live' if runs else 'replayed'} from {step.state}")
        if runs:
            step.intents += 1
            return self._after_live_call(session, step, value)
        return self._after_replay(session, step, value)

    def _ask(self, session: Session, step: ModelStep) -> Any:
        tool = self.tools[step.kind]
        if step.positional:
            return session.vars.run(tool, step=step.label)
        return session.vars.run(session.run.effect, step.step_id, tool, step=step.label)

    def _after_live_call(self, session: Session, step: ModelStep, value: Any) -> bool:
        behaviour = self.last
        if behaviour == "succeed":
            assert value == self.provider.performed[-1].answer
            assert self.provider.performed[-1].key == step.key
            step.state, step.result = StepState.DONE, value
            return True
        if behaviour == "refuse":
            assert isinstance(value, oncelog.EffectRefused)
            assert value.error_type == "Refused"
            step.state = StepState.FAILED
            return True
        if behaviour == "kill":
            assert isinstance(value, SimulatedKill)
            step.state = StepState.IN_FLIGHT
            abandon(self._end_session().run)
            return False
        if step.idempotent:
            assert isinstance(value, ConnectionReset)  # the agent sees the tool's own error
            step.state = StepState.NOT_DONE
            return True
        return self._halts(session, step, value)

    def _after_replay(self, session: Session, step: ModelStep, value: Any) -> bool:
        if step.state is StepState.DONE:
            assert not isinstance(value, BaseException), value
            assert value == step.result
            return True
        if step.state is StepState.FAILED:
            assert isinstance(value, oncelog.EffectRefused)
            return True
        if step.state is StepState.ABANDONED:
            assert isinstance(value, oncelog.EffectAbandoned)
            return True
        return self._halts(session, step, value)

    def _halts(self, session: Session, step: ModelStep, value: Any) -> bool:
        """A non-idempotent effect in doubt: the run halts for a person."""
        assert isinstance(value, oncelog.AmbiguousOutcome), value
        assert (value.run_id, value.step_id, value.key) == (RUN_ID, step.step_id, step.key)
        step.state = StepState.UNKNOWN
        self._end_session()
        session.vars.run(session.context.__exit__, type(value), value, value.__traceback__)
        self.status = RunStatus.HALTED
        return False

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def provider_never_acts_twice_for_a_key(self) -> None:
        for step in self.program:
            calls = self.provider.requests.count(step.key)
            assert calls == step.intents
            if not step.idempotent:
                assert calls <= 1 + self.not_done_resolutions[step.key], step

    @invariant()
    def recorded_steps_match_the_model(self) -> None:
        if self.status is None:
            return
        recorded = self.ledger.steps(RUN_ID)
        assert len(recorded) == len(self.program)
        for record, step in zip(recorded, self.program, strict=True):
            assert (record.seq, record.step_id, record.kind, record.key) == (
                step.position,
                step.step_id,
                step.kind,
                step.key,
            )
            assert record.state is step.state, (record, step)
            assert record.attempts == step.intents
            if step.state is StepState.DONE:
                assert record.result == step.result
        assert self.ledger.get_run(RUN_ID).status is self.status
        in_doubt = {s.step_id for s in self.ledger.in_doubt()}
        assert in_doubt == {s.step_id for s in self.program if s.state in IN_DOUBT}

    @invariant()
    def the_tables_agree_with_the_journal(self) -> None:
        """Whatever was killed when and however people resolved, ``verify`` finds the
        ledger as its own writes left it: no forgery reported where there is none."""
        report = verify(self.ledger.store)
        assert report.ok, report.problems

    @invariant()
    def journal_only_grows(self) -> None:
        entries = self.ledger.journal(RUN_ID, limit=1_000_000)
        assert entries[: len(self.seen_journal)] == self.seen_journal
        self.seen_journal = entries


EffectLifecycle.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestEffectLifecycle = EffectLifecycle.TestCase
