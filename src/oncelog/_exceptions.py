"""Every error oncelog raises, under one base.

    OnceLogError
    ├── UsageError                 a programmer's mistake; fix the code (exit 2)
    │   ├── ConfigurationError     a bad URL, option or store setting
    │   │   ├── LedgerNotFound     opened with create=False where no ledger is
    │   │   └── UnguardedTool      a recorded agent can call a tool nobody guards
    │   ├── InvalidPayload         arguments or a result that cannot be recorded
    │   │   ├── UnserializableValue
    │   │   └── PayloadTooLarge
    │   ├── PlanMismatch           a different plan for an existing run
    │   ├── StepNotInPlan
    │   ├── DuplicateStep          one explicit step id used at two positions
    │   ├── NotATool               an effect given an undecorated callable
    │   └── NoActiveRun            a tool called outside ``ledger.run``
    ├── UnknownName                exit 5: the run, step, request or switch named is not there
    │   ├── UnknownRun
    │   │   └── RunPruned          exit 7: the run ended and was pruned; it is not run again
    │   ├── UnknownStep            lists the run's steps
    │   ├── UnknownHalt            clearing a kill switch that is not on
    │   └── UnknownApproval        deciding a request that is not pending, or not named
    ├── ConflictError              exit 6: the request disagrees with what is recorded
    │   ├── InputMismatch          a run id submitted again with other input
    │   └── InvalidResolution      a decision the step cannot take
    │       ├── AlreadyResolved    the step is not in doubt (any more); says who decided
    │       └── AttemptMismatch    the decision names another attempt than the step's, or none
    ├── RunStopped                 the run cannot go on; see ``exit_code``
    │   ├── NeedsPerson            exit 3: a person must act
    │   │   ├── RunHalted          a kill switch is on (global, agent or run)
    │   │   ├── BudgetExceeded     the next step would go past a limit (policy "stop")
    │   │   ├── AmbiguousOutcome   an effect may or may not have happened
    │   │   ├── PreflightConflict  the provider's state contradicts the effect
    │   │   ├── ReplayDivergence   the code asked for a different step than the journal holds
    │   │   ├── ArgumentDrift      a finished step asked again with other arguments
    │   │   ├── SubjectInDoubt     the subject is held by another run's effect in doubt
    │   │   └── HoldInDoubt        the hold is blocked by another run's effect in doubt
    │   ├── WaitingForPerson       exit 4: the run waits for a person's decision
    │   │   ├── ApprovalRequired   an effect waits for approval of its arguments
    │   │   └── BudgetPaused       a limit is reached; the run waits for a higher one
    │   └── TryLater               exit 75: nothing wrong, run it again later
    │       ├── RunLeased          another live worker owns the run
    │       ├── LeaseLost          this worker's lease was taken over while it ran
    │       ├── Draining           this process is shutting down (SIGTERM); run queued
    │       ├── ResendLater        an effect in doubt is sent again, same key, by a later start
    │       ├── PreflightUnanswered the provider could not be asked before an attempt
    │       ├── ResourceHeld       another run's live process holds the resource
    │       └── SubjectBusy        another live run is acting on the effect's subject
    ├── StepError                  the agent may catch these and carry on
    │   ├── EffectRefused          refused, or its retries ran out (recorded, replayed);
    │   │                          uncaught, exit 3: a person's ``oncelog retry`` moves it
    │   ├── EffectAbandoned        a person gave up on the effect
    │   ├── ApprovalDenied         a person denied the effect with these arguments
    │   ├── SubjectDone            another step did the subject's effect (``repeat="error"``)
    │   └── ResultNotRecorded      the effect happened but its result could not be stored
    └── StoreError                 the ledger itself, and where its journal is shipped
        ├── StoreUnavailable       cannot open, read or durably write now (exit 75)
        ├── SchemaTooNew
        ├── CorruptRecord          a stored row that does not decode
        └── SinkUnavailable        a journal sink did not take a batch; retried (exit 75)

Every other error exits 1. The codes are ``_exit_codes.EXIT_CODES``.

Errors carry structured attributes (``run_id``, ``step_id``, ``key``) and pickle. Their
message is a sentence for a person, with no Python repr tail: ``fields()`` gives the
attributes to show beside it (the CLI and ``run_main`` print them as ``run: ...`` lines).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ._exit_codes import (
    EXIT_CONFLICT,
    EXIT_ERROR,
    EXIT_HALTED,
    EXIT_NOT_FOUND,
    EXIT_PRUNED,
    EXIT_TRY_LATER,
    EXIT_USAGE,
    EXIT_WAITING,
)


class OnceLogError(Exception):
    """Base of every oncelog error."""

    exit_code: ClassVar[int] = EXIT_ERROR

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.step_id = step_id
        self.key = key

    def _fields(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step_id": self.step_id, "key": self.key}

    def _state(self) -> dict[str, Any]:
        """What pickling keeps: the printed fields and any others."""
        return self._fields()

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructors defeat Exception's default pickling.
        return (_rebuild, (type(self), self.message, self._state()))

    def fields(self) -> dict[str, Any]:
        """The attributes that say where it happened, those that are set, to show beside
        the message (``run_id``, ``step_id``, ``key``, and a subclass's own)."""
        return {k: v for k, v in self._fields().items() if v is not None}

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[OnceLogError], message: str, fields: dict[str, Any]) -> OnceLogError:
    return cls(message, **fields)


class UsageError(OnceLogError):
    """The calling code is wrong; retrying will not help."""

    exit_code = EXIT_USAGE


class ConfigurationError(UsageError):
    pass


class LedgerNotFound(ConfigurationError):
    """``oncelog.open(..., create=False)`` found no ledger there (no file, an empty one,
    an empty PostgreSQL schema), or any ``oncelog.open`` a zero-byte SQLite file, which may
    be a ledger truncated to nothing; nothing was created or written."""


class UnguardedTool(ConfigurationError):
    """An agent whose model calls are recorded can call a tool that is neither guarded nor
    declared safe to repeat: on every replay it would run again. ``tool`` names it."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        tool: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.tool = tool

    def _state(self) -> dict[str, Any]:
        return {**self._fields(), "tool": self.tool}


class InvalidPayload(UsageError):
    pass


class UnserializableValue(InvalidPayload):
    pass


class PayloadTooLarge(InvalidPayload):
    pass


class PlanMismatch(UsageError):
    pass


class StepNotInPlan(UsageError):
    pass


class DuplicateStep(UsageError):
    pass


class NotATool(UsageError):
    pass


class NoActiveRun(UsageError):
    pass


class LinkRefused(UsageError):
    """A decision link (from a person-needed notice) that is forged, damaged or expired:
    it decides nothing. ``command``, for an expired link, is the command that makes the
    same decision."""

    def __init__(
        self,
        message: str,
        command: str | None = None,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.command = command

    def _state(self) -> dict[str, Any]:
        return {**self._fields(), "command": self.command}


class UnknownName(OnceLogError):
    """The run, step, request or kill switch named is not there; the message says what is."""

    exit_code = EXIT_NOT_FOUND


class UnknownRun(UnknownName):
    pass


class RunPruned(UnknownRun):
    """The run ended (``status``: completed or failed) and ``oncelog prune`` removed it:
    entering it again would perform its effects again, so it is refused. ``archive`` is
    the file its records went to, ``pruned_at`` when (seconds since the epoch),
    ``anchor`` the journal id of the ``runs_pruned`` record that removed it.
    ``oncelog prune --forget RUN`` lets the id be used again (docs/retention.md)."""

    exit_code = EXIT_PRUNED

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        status: str | None = None,
        archive: str | None = None,
        pruned_at: float | None = None,
        anchor: int | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.status = status
        self.archive = archive
        self.pruned_at = pruned_at
        self.anchor = anchor

    def _fields(self) -> dict[str, Any]:
        return {
            **super()._fields(), "status": self.status, "archive": self.archive,
            "pruned_at": self.pruned_at, "anchor": self.anchor,
        }  # fmt: skip


class UnknownStep(UnknownName):
    """The run has no step of that id; the message lists the steps it has."""


class UnknownHalt(UnknownName):
    pass


class UnknownAgent(UnknownName):
    """No run of that agent is recorded (a kill switch for it would stop nothing)."""


class UnknownApproval(UnknownName):
    pass


class UnknownHold(UnknownName):
    """No run holds a resource of that name (never taken, or released already)."""


class ConflictError(OnceLogError):
    """The request disagrees with what is recorded (perhaps a race with another person or
    process): read the run again before deciding anything."""

    exit_code = EXIT_CONFLICT


class InputMismatch(ConflictError):
    pass


class ArchiveExists(ConflictError):
    """``prune`` was given an archive file that is there already and holds no earlier
    prune of this kind: an archive is never written over; name a new file."""


class InvalidResolution(ConflictError):
    """A decision the step cannot take: not a resolution, or a result with the wrong one."""


class AlreadyResolved(InvalidResolution):
    """The step is not in doubt: its outcome is recorded, or a person decided already (the
    message says who and when)."""


class LinkUsed(ConflictError):
    """A decision link (from a person-needed notice) that decided already: a link is the
    credential for its one decision, taken once. ``used_by``, ``used_at`` (store clock)
    and ``decision`` say who used it, when, and what it decided; nothing more is
    recorded."""

    def __init__(
        self,
        message: str,
        *,
        used_by: str | None = None,
        used_at: float | None = None,
        decision: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.used_by = used_by
        self.used_at = used_at
        self.decision = decision

    def _state(self) -> dict[str, Any]:
        return {
            **self._fields(), "used_by": self.used_by, "used_at": self.used_at,
            "decision": self.decision,
        }  # fmt: skip


class NotRetryable(ConflictError):
    """A retry that could perform an effect twice: the step is done, in doubt, abandoned
    by a person, or the run went on past it. The message names the command that fits."""


class AttemptMismatch(InvalidResolution):
    """The decision was made on another attempt of the step than the one it is at now
    (the step was run again since the person looked), or names none where one is needed:
    the message names the step's attempt and state now."""


class RunStopped(OnceLogError):
    """The run cannot continue in this process."""

    # Given by a run that stopped for a person to whoever catches the stop (``run_main``):
    # wait up to this many seconds for the decision, journalling the wait under the given
    # lease owner identity of this process; True if one came. Not pickled.
    wait_for_decision: Callable[[float, str], bool] | None = None


class NeedsPerson(RunStopped):
    """The run is halted until a person decides."""

    exit_code = EXIT_HALTED


class RunHalted(NeedsPerson):
    """A durable kill switch covers this run; only a named person can clear it."""


class RetriesPaused(NeedsPerson):
    """A person paused the effect's retries: its next attempt waits until a person
    resumes them (``oncelog retry RUN STEP --resume``), with the same key."""


def halted(halt: Any, run_id: str, step_id: str | None = None) -> RunHalted:
    """The error for a step refused by ``halt`` (an ``oncelog.Halt``)."""
    from ._commands import option  # when a run meets a halt: ``import oncelog`` stays small

    scope = halt.scope.value
    where = "global" if scope == "global" else f"{scope} {halt.target!r}"
    switch = "--global" if scope == "global" else option(f"--{scope}", halt.target)
    return RunHalted(
        f"the {where} kill switch is on ({halt.reason}; set by {halt.set_by}); a person "
        f"clears it with: oncelog resume {switch} --by NAME",
        run_id=run_id,
        step_id=step_id,
    )


class _OverBudget(OnceLogError):
    """Carries the ``oncelog.BudgetAlert`` of the limit that stopped the step."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        alert: Any = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.alert = alert

    def _state(self) -> dict[str, Any]:
        return {**self._fields(), "alert": self.alert}


class BudgetExceeded(_OverBudget, NeedsPerson):
    """The next step would go past a limit whose policy is ``stop``; a person may raise it."""


class AmbiguousOutcome(NeedsPerson):
    """An effect's intent is recorded but not its outcome: it may have happened.
    ``attempt`` is the attempt in doubt, which a person's decision names."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        attempt: int | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.attempt = attempt

    def _state(self) -> dict[str, Any]:
        return {**self._fields(), "attempt": self.attempt}


def in_doubt(reason: str, run_id: str, step_id: str, key: str, attempt: int) -> AmbiguousOutcome:
    """The error for an effect whose outcome is unknown: ``reason``, then the command a
    person runs once they have found out at the provider."""
    return AmbiguousOutcome(
        f"{reason}. Look key {key} up at the provider, then decide, one of: "
        f"{decide_text(run_id, step_id, attempt)}",
        run_id=run_id, step_id=step_id, key=key, attempt=attempt,
    )  # fmt: skip


def resolve_command(
    run_id: str, step_id: str, attempt: int | None, *, then: str, options: str = "--by NAME"
) -> str:
    """The ``oncelog resolve`` command of one decision (``then``) on ``attempt`` of a
    step, quoted to paste as printed: every command oncelog prints for a person's decision
    names the attempt the person was shown, so that it is refused once the step has moved
    on. For an effect in doubt, ``decide_commands`` gives each decision's."""
    from ._commands import oncelog_command  # as ``halted`` imports it

    named = options if attempt is None else f"{options} --attempt {attempt}"
    return oncelog_command("resolve", [run_id, step_id], then=then, options=named)


# Each decision on an effect in doubt: what ``resolve`` is given (NAME stands for the
# person's name, refused as typed), and when it is the one to run. Every surface prints
# all three, so that the one pasted is accepted. ``done`` is printed with ``--no-result``,
# never with a placeholder answer: pasted as printed, the agent gets ``NO_RESULT``, which
# it can tell from data (a printed ``{}`` reached a model as the provider's answer, and
# ``{}`` stays accepted for a person who means it); a tool's ``result_schema`` takes it.
DECISIONS = (
    ("done", "--no-result --by NAME", "it happened: the agent gets NO_RESULT, or the "
     "provider's answer if you give it instead (--result 'JSON')"),
    ("not_done", "--by NAME", "it did not happen: it is sent again, with the same key"),
    ("abandon", "--by NAME", "give it up: the agent gets EffectAbandoned at this step"),
)  # fmt: skip


def decide_commands(run_id: str, step_id: str, attempt: int | None) -> list[str]:
    """The ``oncelog resolve`` command of each decision on an effect in doubt, each
    pasteable as printed (``DECISIONS``)."""
    return [
        resolve_command(run_id, step_id, attempt, then=then, options=options)
        for then, options, _ in DECISIONS
    ]


def decide_text(run_id: str, step_id: str, attempt: int | None) -> str:
    """``decide_commands`` in one line of an error message: each command whole, then in
    brackets when it is the one."""
    commands = decide_commands(run_id, step_id, attempt)
    return "; ".join(
        f"{command} ({why.partition(':')[0]})"
        for command, (_, _, why) in zip(commands, DECISIONS, strict=True)
    )


class PreflightConflict(NeedsPerson):
    """A tool's preflight answered ``Conflict``: the effect is held for a person, with the
    provider's answer as the reason."""


class ReplayDivergence(NeedsPerson):
    """The agent asked for a different step than the one recorded at that position."""


class ArgumentDrift(NeedsPerson):
    """A recorded step was asked for again with different arguments."""


class _Held(OnceLogError):
    """Names the hold (``resource``, as ``oncelog holds`` prints it) and the run that has
    it (``holder``)."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        resource: str | None = None,
        holder: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.resource = resource
        self.holder = holder

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "resource": self.resource, "holder": self.holder}


class HoldInDoubt(_Held, NeedsPerson):
    """Another run holds the resource, no live process holds that run, and an effect it
    began under the hold is in doubt: only that run's restart or a person's decision on
    its step ``held_by_step`` frees it; a restart of this run alone never does."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        resource: str | None = None,
        holder: str | None = None,
        held_by_step: str | None = None,
    ) -> None:
        super().__init__(
            message, run_id=run_id, step_id=step_id, key=key, resource=resource, holder=holder
        )
        self.held_by_step = held_by_step

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "held_by_step": self.held_by_step}


class _Subject(OnceLogError):
    """Names the subject an effect acts on and the step of another run that holds it."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        subject: str | None = None,
        held_by_run: str | None = None,
        held_by_step: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.subject = subject
        self.held_by_run = held_by_run
        self.held_by_step = held_by_step

    def _fields(self) -> dict[str, Any]:
        return {
            **super()._fields(), "subject": self.subject, "held_by_run": self.held_by_run,
            "held_by_step": self.held_by_step,
        }  # fmt: skip


class SubjectInDoubt(_Subject, NeedsPerson):
    """The effect's subject is held by a step of another run whose outcome is in doubt and
    whose run no live process holds: that run's restart (its probe, its key's window) or a
    person's decision on that step settles it; nothing is sent from here."""


class WaitingForPerson(RunStopped):
    """The run waits for a person's decision; async code awaits it instead."""

    exit_code = EXIT_WAITING


class ApprovalRequired(WaitingForPerson):
    """The effect waits for a person's approval of exactly these arguments."""


class BudgetPaused(_OverBudget, WaitingForPerson):
    """A limit whose policy is ``pause`` or ``escalate`` is reached: the run waits until a
    person raises it."""


class TryLater(RunStopped):
    """Nothing is wrong with the run; another attempt later will proceed."""

    exit_code = EXIT_TRY_LATER


class RunLeased(TryLater):
    pass


class ResourceHeld(_Held, TryLater):
    """Another run holds the resource and a live process holds that run (its lease runs):
    its hold ends with its block or its lease. Where the holder's process is gone and an
    effect it began under the hold is in doubt, the refusal is ``HoldInDoubt``."""


class LeaseLost(TryLater):
    pass


class Draining(TryLater):
    """The process is shutting down: the step was not started, the run is queued again."""


class ResendLater(TryLater):
    """An effect is in doubt, or still in progress at the provider, and left in flight for
    a later start of the run, which sends it again with the same key while the provider
    deduplicates it (``dedupe_window``), or else asks the probe or a person."""


class PreflightUnanswered(TryLater):
    """The preflight could not tell (it raised or answered ``CANNOT_TELL``); nothing was
    sent, and a later start asks again."""


class SubjectBusy(_Subject, TryLater):
    """A live run is acting on the effect's subject now; nothing was sent, and a later
    start finds its outcome."""


class StepError(OnceLogError):
    """A recorded step ended without a usable result; the agent may handle it."""


class EffectRefused(StepError):
    """The provider definitely refused, or the retry policy gave up; the refusal is
    recorded and replayed. A run it ends is failed, and every restart meets it again:
    only a person's ``oncelog retry`` (or ``redrive``) moves it, so the process exits 3,
    as for every stop a person must act on, and its message names the command."""

    exit_code = EXIT_HALTED

    # As ``RunStopped``'s: given when the refusal ended the run (failed), whose way on is a
    # person's ``oncelog retry`` or ``redrive`` (the run is queued again); ``run_main``
    # with ``wait_for_person`` waits for one, and goes on by itself.
    wait_for_decision: Callable[[float, str], bool] | None = None

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        key: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, step_id=step_id, key=key)
        self.error_type = error_type

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "error_type": self.error_type}


def effect_refused(
    reason: str, run_id: str, step_id: str, key: str, error_type: str | None
) -> EffectRefused:
    """The error for an effect the provider refused, or whose retry policy gave up:
    ``reason``, then the command a person runs once the effect may succeed."""
    from ._commands import oncelog_command  # as ``halted`` imports it

    retry = oncelog_command("retry", [run_id, step_id], options="--by NAME --why WHY")
    return EffectRefused(
        f"{reason}. Once it may succeed, a person gives it a fresh set of attempts with "
        f"the same key: {retry}; then start the run again",
        run_id=run_id, step_id=step_id, key=key, error_type=error_type,
    )  # fmt: skip


class EffectAbandoned(StepError):
    pass


class ApprovalDenied(StepError):
    """A person denied this effect with these arguments; the agent may do something else."""


class ResultNotRecorded(StepError):
    pass


class SubjectDone(_Subject, StepError):
    """The effect's subject was acted on by another step, and its tool says a repeat is
    an error (``repeat="error"``): nothing was sent or recorded."""


class StoreError(OnceLogError):
    pass


class StoreUnavailable(StoreError):
    """The ledger cannot be written now (a full disk, an I/O error, a lock held too long).
    A failed commit may or may not have reached the disk: a restart finds out."""

    exit_code = EXIT_TRY_LATER


class SchemaTooNew(StoreError):
    pass


class CorruptRecord(StoreError):
    pass


class SinkUnavailable(StoreError):
    """A sink did not take a batch of the journal; the shipper keeps it and tries again."""

    exit_code = EXIT_TRY_LATER
