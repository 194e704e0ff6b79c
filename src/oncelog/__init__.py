"""oncelog: exactly-once side effects for AI agents.

Intent is durable before every external call and the outcome right after; a resumed run
replays recorded results instead of calling again; an effect whose outcome cannot be
known halts the run until a person decides.
"""

# The errors are imported with the package (``except oncelog.RunHalted`` needs no more);
# every other public name is imported from its module when first asked for (PEP 562), so
# a process that imports oncelog pays only for the parts it uses: the CLI's help, a
# worker's handler module, code that only catches oncelog's errors.

import typing as _typing

from ._exceptions import (
    AlreadyResolved,
    AmbiguousOutcome,
    ApprovalDenied,
    ApprovalRequired,
    ArchiveExists,
    ArgumentDrift,
    AttemptMismatch,
    BudgetExceeded,
    BudgetPaused,
    ConfigurationError,
    ConflictError,
    CorruptRecord,
    Draining,
    DuplicateStep,
    EffectAbandoned,
    EffectRefused,
    HoldInDoubt,
    InputMismatch,
    InvalidPayload,
    InvalidResolution,
    LeaseLost,
    LedgerNotFound,
    LinkRefused,
    LinkUsed,
    NeedsPerson,
    NoActiveRun,
    NotATool,
    NotRetryable,
    OnceLogError,
    PayloadTooLarge,
    PlanMismatch,
    PreflightConflict,
    PreflightUnanswered,
    ReplayDivergence,
    ResendLater,
    ResourceHeld,
    ResultNotRecorded,
    RetriesPaused,
    RunHalted,
    RunLeased,
    RunPruned,
    RunStopped,
    SchemaTooNew,
    StepError,
    StepNotInPlan,
    StoreError,
    StoreUnavailable,
    SubjectBusy,
    SubjectDone,
    SubjectInDoubt,
    TryLater,
    UnguardedTool,
    UnknownAgent,
    UnknownApproval,
    UnknownHalt,
    UnknownHold,
    UnknownName,
    UnknownRun,
    UnknownStep,
    UnserializableValue,
    UsageError,
    WaitingForPerson,
)
from ._exit_codes import EXIT_COMPLETED, EXIT_HALTED, EXIT_PRUNED, EXIT_TRY_LATER, EXIT_WAITING
from .records._no_result import NO_RESULT

if _typing.TYPE_CHECKING:
    from ._ledger import Ledger, open
    from ._secret_file import private_secret
    from ._worker import Worker
    from .audit._signing import new_key_pair
    from .controls._links import DecisionLink
    from .controls._notices import PersonNeeded
    from .process._fleet import Fleet
    from .process._process import exit_code_for, explain, run_main
    from .records._budgets import AgentBudget, AgentBudgetSetting, Budget, BudgetAlert
    from .records._records import (
        Approval,
        ApprovalEdit,
        ApprovalStatus,
        EffectInDoubt,
        Halt,
        HaltScope,
        HoldRecord,
        JournalEntry,
        Resolution,
        RunRecord,
        RunStatus,
        StepRecord,
        StepState,
        StepType,
        SubjectClaim,
    )
    from .records._serialization import canonical_json
    from .runtime._calls import idempotency_key
    from .runtime._probes import (
        CANNOT_TELL,
        NOT_FOUND,
        Conflict,
        Found,
        Preflight,
        PreflightAnswer,
        Probe,
        ProbeAnswer,
    )
    from .runtime._retry import Retry
    from .runtime._run import AsyncRun, Run, RunContext, current_run
    from .runtime._tools import Kind, KindName, Tool, tool
    from .signals._drain import drain, draining, handle_sigterm, wait_for_drain
    from .stores import DEFAULT_PATH

# Where each name imported on first use lives: the same names as the imports above.
_LAZY = {
    **dict.fromkeys(("Ledger", "open"), "_ledger"),
    **dict.fromkeys(
        ("AgentBudget", "AgentBudgetSetting", "Budget", "BudgetAlert"), "records._budgets"
    ),
    "PersonNeeded": "controls._notices",
    "DecisionLink": "controls._links",
    **dict.fromkeys(("drain", "draining", "handle_sigterm", "wait_for_drain"), "signals._drain"),
    "DEFAULT_PATH": "stores",
    "new_key_pair": "audit._signing",
    "private_secret": "_secret_file",
    "canonical_json": "records._serialization",
    **dict.fromkeys(("exit_code_for", "explain", "run_main"), "process._process"),
    "Worker": "_worker",
    "Fleet": "process._fleet",
    **dict.fromkeys(
        (
            "Approval",
            "ApprovalEdit",
            "ApprovalStatus",
            "EffectInDoubt",
            "Halt",
            "HaltScope",
            "HoldRecord",
            "JournalEntry",
            "Resolution",
            "RunRecord",
            "RunStatus",
            "StepRecord",
            "StepState",
            "StepType",
            "SubjectClaim",
        ),
        "records._records",
    ),
    "idempotency_key": "runtime._calls",
    **dict.fromkeys(
        (
            "CANNOT_TELL",
            "NOT_FOUND",
            "Conflict",
            "Found",
            "Preflight",
            "PreflightAnswer",
            "Probe",
            "ProbeAnswer",
        ),
        "runtime._probes",
    ),
    "Retry": "runtime._retry",
    **dict.fromkeys(("AsyncRun", "Run", "RunContext", "current_run"), "runtime._run"),
    **dict.fromkeys(("Kind", "KindName", "Tool", "tool"), "runtime._tools"),
}

__all__ = [
    "CANNOT_TELL",
    "DEFAULT_PATH",
    "EXIT_COMPLETED",
    "EXIT_HALTED",
    "EXIT_PRUNED",
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
    "ApprovalEdit",
    "ApprovalRequired",
    "ApprovalStatus",
    "ArchiveExists",
    "ArgumentDrift",
    "AsyncRun",
    "AttemptMismatch",
    "Budget",
    "BudgetAlert",
    "BudgetExceeded",
    "BudgetPaused",
    "ConfigurationError",
    "Conflict",
    "ConflictError",
    "CorruptRecord",
    "DecisionLink",
    "Draining",
    "DuplicateStep",
    "EffectAbandoned",
    "EffectInDoubt",
    "EffectRefused",
    "Fleet",
    "Found",
    "Halt",
    "HaltScope",
    "HoldInDoubt",
    "HoldRecord",
    "InputMismatch",
    "InvalidPayload",
    "InvalidResolution",
    "JournalEntry",
    "Kind",
    "KindName",
    "LeaseLost",
    "Ledger",
    "LedgerNotFound",
    "LinkRefused",
    "LinkUsed",
    "NeedsPerson",
    "NoActiveRun",
    "NotATool",
    "NotRetryable",
    "OnceLogError",
    "PayloadTooLarge",
    "PersonNeeded",
    "PlanMismatch",
    "Preflight",
    "PreflightAnswer",
    "PreflightConflict",
    "PreflightUnanswered",
    "Probe",
    "ProbeAnswer",
    "ReplayDivergence",
    "ResendLater",
    "Resolution",
    "ResourceHeld",
    "ResultNotRecorded",
    "RetriesPaused",
    "Retry",
    "Run",
    "RunContext",
    "RunHalted",
    "RunLeased",
    "RunPruned",
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
    "SubjectBusy",
    "SubjectClaim",
    "SubjectDone",
    "SubjectInDoubt",
    "Tool",
    "TryLater",
    "UnguardedTool",
    "UnknownAgent",
    "UnknownApproval",
    "UnknownHalt",
    "UnknownHold",
    "UnknownName",
    "UnknownRun",
    "UnknownStep",
    "UnserializableValue",
    "UsageError",
    "WaitingForPerson",
    "Worker",
    "canonical_json",
    "current_run",
    "drain",
    "draining",
    "exit_code_for",
    "explain",
    "handle_sigterm",
    "idempotency_key",
    "new_key_pair",
    "open",
    "private_secret",
    "run_main",
    "tool",
    "wait_for_drain",
]


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is not None:
        from importlib import import_module

        value = getattr(import_module(f"oncelog.{module}"), name)
        globals()[name] = value  # asked once: later lookups find it like any global
        return value
    # The version is read from the installed package's metadata, when asked for:
    # importlib.metadata would cost more than the rest of ``import oncelog``.
    if name == "__version__":
        from importlib.metadata import version

        return version("oncelog")
    raise AttributeError(f"module 'oncelog' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
