"""oncelog: exactly-once side effects for AI agents.

Intent is durable before every external call and the outcome right after; a resumed run
replays recorded results instead of calling again; an effect whose outcome cannot be
known halts the run until a person decides.
"""

from ._budgets import AgentBudget, AgentBudgetSetting, Budget, BudgetAlert
from ._calls import idempotency_key
from ._drain import handle_sigterm
from ._exceptions import (
    AlreadyResolved,
    AmbiguousOutcome,
    ApprovalDenied,
    ApprovalRequired,
    ArgumentDrift,
    BudgetExceeded,
    BudgetPaused,
    ConfigurationError,
    ConflictError,
    CorruptRecord,
    Draining,
    DuplicateStep,
    EffectAbandoned,
    EffectRefused,
    InputMismatch,
    InvalidPayload,
    InvalidResolution,
    LeaseLost,
    LedgerNotFound,
    NeedsPerson,
    NoActiveRun,
    NotATool,
    OnceLogError,
    PayloadTooLarge,
    PlanMismatch,
    PreflightConflict,
    PreflightUnanswered,
    ReplayDivergence,
    ResendLater,
    ResultNotRecorded,
    RunHalted,
    RunLeased,
    RunStopped,
    SchemaTooNew,
    StepError,
    StepNotInPlan,
    StoreError,
    StoreUnavailable,
    TryLater,
    UnguardedTool,
    UnknownApproval,
    UnknownHalt,
    UnknownName,
    UnknownRun,
    UnknownStep,
    UnserializableValue,
    UsageError,
    WaitingForPerson,
)
from ._exit_codes import EXIT_COMPLETED, EXIT_HALTED, EXIT_TRY_LATER, EXIT_WAITING
from ._ledger import Ledger, open
from ._no_result import NO_RESULT
from ._notices import PersonNeeded
from ._probes import CANNOT_TELL, NOT_FOUND, Conflict, Found, PreflightAnswer, ProbeAnswer
from ._process import (
    exit_code_for,
    run_main,
)
from ._records import (
    Approval,
    ApprovalStatus,
    EffectInDoubt,
    Halt,
    HaltScope,
    JournalEntry,
    Resolution,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
    StepType,
)
from ._retry import Retry
from ._run import AsyncRun, Run, current_run
from ._tools import Kind, Tool, tool
from ._worker import Worker

__all__ = [
    "CANNOT_TELL",
    "EXIT_COMPLETED",
    "EXIT_HALTED",
    "EXIT_TRY_LATER",
    "EXIT_WAITING",
    "NOT_FOUND",
    "NO_RESULT",
    "AgentBudget",
    "AgentBudgetSetting",
    "AlreadyResolved",
    "AmbiguousOutcome",
    "Approval",
    "ApprovalDenied",
    "ApprovalRequired",
    "ApprovalStatus",
    "ArgumentDrift",
    "AsyncRun",
    "Budget",
    "BudgetAlert",
    "BudgetExceeded",
    "BudgetPaused",
    "ConfigurationError",
    "Conflict",
    "ConflictError",
    "CorruptRecord",
    "Draining",
    "DuplicateStep",
    "EffectAbandoned",
    "EffectInDoubt",
    "EffectRefused",
    "Found",
    "Halt",
    "HaltScope",
    "InputMismatch",
    "InvalidPayload",
    "InvalidResolution",
    "JournalEntry",
    "Kind",
    "LeaseLost",
    "Ledger",
    "LedgerNotFound",
    "NeedsPerson",
    "NoActiveRun",
    "NotATool",
    "OnceLogError",
    "PayloadTooLarge",
    "PersonNeeded",
    "PlanMismatch",
    "PreflightAnswer",
    "PreflightConflict",
    "PreflightUnanswered",
    "ProbeAnswer",
    "ReplayDivergence",
    "ResendLater",
    "Resolution",
    "ResultNotRecorded",
    "Retry",
    "Run",
    "RunHalted",
    "RunLeased",
    "RunRecord",
    "RunStatus",
    "RunStopped",
    "SchemaTooNew",
    "StepError",
    "StepNotInPlan",
    "StepRecord",
    "StepState",
    "StepType",
    "StoreError",
    "StoreUnavailable",
    "Tool",
    "TryLater",
    "UnguardedTool",
    "UnknownApproval",
    "UnknownHalt",
    "UnknownName",
    "UnknownRun",
    "UnknownStep",
    "UnserializableValue",
    "UsageError",
    "WaitingForPerson",
    "Worker",
    "current_run",
    "exit_code_for",
    "handle_sigterm",
    "idempotency_key",
    "open",
    "run_main",
    "tool",
]


def __getattr__(name: str) -> str:
    # The version is read from the installed package's metadata, when asked for:
    # importlib.metadata would cost more than the rest of ``import oncelog``.
    if name == "__version__":
        from importlib.metadata import version

        return version("oncelog")
    raise AttributeError(f"module 'oncelog' has no attribute {name!r}")
