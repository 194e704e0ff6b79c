"""The public surface is deliberate: adding or removing a name is a visible change."""

from __future__ import annotations

import pickle
import types

import oncelog

PUBLIC = {
    "CANNOT_TELL", "EXIT_COMPLETED", "EXIT_HALTED", "EXIT_TRY_LATER", "EXIT_WAITING",
    "NOT_FOUND", "Found", "Conflict", "PreflightAnswer", "PreflightConflict",
    "PreflightUnanswered", "ResendLater", "Retry",
    "AgentBudget", "AmbiguousOutcome", "Approval", "ApprovalDenied", "ApprovalRequired",
    "ApprovalStatus",
    "ArgumentDrift", "AsyncRun", "Budget", "BudgetAlert", "BudgetExceeded", "BudgetPaused",
    "ConfigurationError", "CorruptRecord",
    "Draining", "DuplicateStep", "EffectAbandoned", "EffectInDoubt", "EffectRefused", "Halt",
    "HaltScope",
    "InputMismatch", "InvalidPayload", "InvalidResolution", "JournalEntry", "Kind", "LeaseLost",
    "Ledger", "LedgerNotFound", "NO_RESULT",
    "NeedsPerson", "NoActiveRun", "NotATool", "OnceLogError", "PayloadTooLarge", "PersonNeeded",
    "PlanMismatch", "ProbeAnswer", "ReplayDivergence", "Resolution", "ResultNotRecorded", "Run",
    "RunHalted", "RunLeased", "RunRecord", "RunStatus", "RunStopped", "SchemaTooNew",
    "StepError", "StepNotInPlan", "StepRecord", "StepState", "StepType", "StoreError",
    "StoreUnavailable", "Tool", "TryLater", "UnguardedTool", "UnknownApproval", "UnknownHalt",
    "UnknownRun", "UnknownStep",
    "UnserializableValue", "UsageError", "WaitingForPerson", "Worker", "current_run",
    "exit_code_for", "handle_sigterm", "idempotency_key",
    "open", "run_main", "tool",
}  # fmt: skip


def test_public_names_are_pinned() -> None:
    # ruff (RUF022) keeps __all__ sorted; this pins its content.
    assert set(oncelog.__all__) == PUBLIC
    assert len(oncelog.__all__) == len(PUBLIC)
    for name in oncelog.__all__:
        value = getattr(oncelog, name)
        exempt = isinstance(value, (int, types.UnionType))  # constants and type aliases
        assert exempt or value.__module__.startswith("oncelog"), name


def test_every_error_has_one_base_and_pickles() -> None:
    errors = [v for v in vars(oncelog).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(errors) > 20
    for cls in errors:
        assert issubclass(cls, oncelog.OnceLogError)
        exc = cls("message", run_id="r", step_id="s", key="k")
        copy = pickle.loads(pickle.dumps(exc))
        assert type(copy) is cls
        assert (copy.run_id, copy.step_id, copy.key, str(copy)) == ("r", "s", "k", str(exc))


def test_exit_codes_follow_the_design() -> None:
    assert oncelog.NeedsPerson.exit_code == oncelog.EXIT_HALTED == 3
    assert oncelog.TryLater.exit_code == oncelog.EXIT_TRY_LATER == 75
    assert oncelog.ApprovalRequired.exit_code == oncelog.EXIT_WAITING == 4
    assert oncelog.UsageError.exit_code == 1
