"""What people decide, through the ``Ledger``: effects in doubt resolved, approvals given
or refused, budgets changed, kill switches turned on and off, and the reads that go with
them. Every change names who made it (``by``) and is journalled by the store.

``PersonDecisions`` is a part of ``Ledger`` (its base class), kept apart from running
agents: nothing here starts, resumes or runs a step. It uses what ``Ledger`` holds, named
below, and does not import ``_ledger`` (imports run one way).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from . import _numbers as numbers
from ._exceptions import ConfigurationError, InvalidPayload, InvalidResolution
from .process import _leases as leases
from .records._budgets import AgentBudget, AgentBudgetSetting, Budget, Usage
from .records._no_result import NO_RESULT
from .records._records import (
    Approval,
    ApprovalEdit,
    ApprovalStatus,
    Halt,
    HaltScope,
    HoldRecord,
    Resolution,
    StepRecord,
    UsedLink,
)
from .records._serialization import decode, encode
from .runtime._names import check_name, check_text

# What only some decisions use is imported by them: an open imports this module.
if TYPE_CHECKING:
    from ._person_results import Form
    from .controls._waiting import Waiter
    from .stores import Store

MAX_NONCE_CHARS = 64  # a link's nonce is 16 characters; a longer one is no link's
_UNSET: Any = object()  # resolve() given no result at all, which None cannot stand for


class PersonDecisions:
    """A person's side of a ledger (a base of ``Ledger``, which sets what is named here)."""

    store: Store
    max_payload_bytes: int
    approval_poll: float  # seconds between looks, while async code waits
    # tool -> (schema object, form, contract) this process stored
    _declared_results: dict[str, tuple[object, str, str]]
    steps: Callable[[str], list[StepRecord]]  # every recorded step of a run, in order

    @property
    def waiter(self) -> Waiter:
        """Waits for a person's decision on one of the ledger's runs (made by ``Ledger``
        at first use)."""
        raise NotImplementedError

    # -- effects in doubt, and a person's result ---------------------------------------

    def resolve(
        self,
        run_id: str,
        step_id: str,
        resolution: Resolution | Literal["done", "not_done", "abandon"],
        *,
        by: str,
        result: Any = _UNSET,
        note: str | None = None,
        force: bool = False,
        correct: bool = False,
        attempt: int | None = None,
        link: str | None = None,
    ) -> StepRecord:
        """Decide an effect in doubt: ``done`` with ``result``, the provider's answer (or
        ``result=oncelog.NO_RESULT`` if it cannot be known: the agent then gets
        ``NO_RESULT`` there, now and on every replay); ``not_done`` (safe to run again,
        with the same key) or ``abandon``. ``by`` names the person. While a live process
        holds the run's lease it may be running the step: ``RunLeased``, unless
        ``force`` (journalled, with the owner overridden).

        A ``done`` result must fit what the tool declared (``result_schema=``, or an MCP
        tool's output schema; an MCP tool also takes a plain text), else
        ``InvalidResolution`` says why. ``correct=True`` replaces a person's earlier
        resolution of the run's last step, as long as nothing has acted on it (no later
        step, the run not completed); the journal keeps both.

        ``attempt`` names the attempt of the step the person looked at (``StepRecord.attempts``
        as they were shown it), and the decision is refused (``AttemptMismatch``) if the
        step has been run again since: what they found at the provider is about an older
        send. The CLI and the console always send it; None (the default, for code that
        reads the step and decides in one go) checks none.

        ``link`` is the nonce of the notice's signed link the decision is made through
        (``DecisionLink.nonce``): the decision takes it in its own transaction, and a link
        that decided already is refused (``LinkUsed``): a link decides once."""
        _check_decision("resolve", by, note, run_id, step_id)
        _check_link(link)
        _check_attempt(attempt, run_id, step_id)
        resolution = _resolution(resolution, run_id, step_id)
        if resolution is Resolution.DONE and result is not _UNSET and result is not NO_RESULT:
            result = self._person_result(run_id, step_id, result)
        result_json = self._resolution_result(resolution, result, run_id, step_id)
        return self.store.resolve(
            run_id, step_id, resolution, result_json=result_json, by=by, note=note,
            force=force, owner_is_dead=leases.is_dead, attempt=attempt, correct=correct,
            link=link,
        )  # fmt: skip

    def retry(
        self,
        run_id: str,
        step_id: str,
        *,
        by: str,
        why: str,
        force: bool = False,
        link: str | None = None,
    ) -> StepRecord:
        """Give an effect known not to have happened a fresh set of attempts, with the same
        idempotency key: one whose retry policy ran out or that the provider refused
        (``EffectRefused``), or one waiting for its next attempt after an outage (it is
        tried at once). The run goes on from that step at its next start (a run that
        ended on the refusal is queued again); the steps before it are kept. ``by`` and
        ``why`` are journalled.

        Refused with ``NotRetryable``, naming the command that fits, where a retry could
        perform the effect twice: a done step, one in doubt (resolve it), one a person
        abandoned (correct that decision), or one the run went on past. ``RunLeased``
        while a live process holds the run, unless ``force``. ``link`` as for ``resolve``:
        the retry takes it in its own transaction, and a link decides once."""
        _check_decision("retry", by, why, run_id, step_id)
        _check_link(link)
        if not why:
            raise ConfigurationError("retry(..., why=...) must say why", run_id=run_id)
        return self.store.retry_step(
            run_id, step_id, by=by, why=why, force=force, owner_is_dead=leases.is_dead,
            link=link,
        )  # fmt: skip

    def pause_retries(
        self, run_id: str, step_id: str, *, by: str, why: str, resume: bool = False
    ) -> StepRecord:
        """Pause an effect's retries (``resume``: end the pause). A paused effect is not
        attempted again: the run stops at its next attempt (``RetriesPaused``, halted,
        exit 3) until a person resumes it, which queues the run again; it then goes on
        with the same key (a waiting agent by itself). ``oncelog retry`` ends a pause too.
        ``by`` and ``why`` are journalled. ``NotRetryable`` for a step with no attempts to
        make (done, in doubt, abandoned), one paused already, or a resume of one that is
        not paused."""
        _check_decision("pause_retries", by, why, run_id, step_id)
        if not why:
            raise ConfigurationError("pause_retries(..., why=...) must say why", run_id=run_id)
        return self.store.pause_retries(run_id, step_id, paused=not resume, by=by, why=why)

    def _resolution_result(
        self, resolution: Resolution, result: Any, run_id: str, step_id: str
    ) -> str | None:
        """The recorded result of a decision: given with ``done`` only, and never left
        out by accident (a forgotten result would reach the agent as None)."""
        if resolution is not Resolution.DONE:
            if result is not _UNSET and result is not None:
                raise InvalidResolution(
                    f"a result goes with 'done' only, not {resolution.value!r}",
                    run_id=run_id, step_id=step_id,
                )  # fmt: skip
            return None
        if result is _UNSET:
            raise InvalidResolution(
                "'done' needs the provider's result (result=...), or result=oncelog.NO_RESULT "
                "if it cannot be known",
                run_id=run_id, step_id=step_id,
            )  # fmt: skip
        if result is NO_RESULT:
            return None
        try:
            return encode(result, what="result", limit=self.max_payload_bytes)
        except InvalidPayload as exc:
            raise type(exc)(exc.message, run_id=run_id, step_id=step_id) from None

    def wait_for_decision(self, run_id: str, *, timeout: float | timedelta) -> bool:
        """Wait until a person's decision may let the run ``run_id``, stopped for a person
        (halted or waiting, or failed on a refusal: a retry or redrive), go on: then True,
        and running the agent's code again continues it. False if no decision came within
        ``timeout``; ``Draining`` if this process starts draining (SIGTERM) meanwhile. The
        run holds no lease while it waits. On PostgreSQL the decision wakes the waiter at
        once (LISTEN/NOTIFY); otherwise it looks every ``approval_poll`` seconds."""
        seconds = numbers.seconds(timeout, "timeout", positive=False)
        waiter = leases.new_owner()
        try:
            return self.waiter.wait(run_id, seconds, waiter)
        finally:
            leases.forget(waiter)

    async def wait_for_decision_async(self, run_id: str, *, timeout: float | timedelta) -> bool:
        """``wait_for_decision`` for async code: the event loop goes on meanwhile."""
        import asyncio  # only async code pays for it (see _run._in_thread)

        return await asyncio.to_thread(self.wait_for_decision, run_id, timeout=timeout)

    def _person_result(self, run_id: str, step_id: str, result: Any) -> Any:
        """A person's result, shaped and checked as the step's tool declared."""
        step = next((s for s in self.steps(run_id) if s.step_id == step_id), None)
        contract = None if step is None else self.store.result_contract(step.tool)
        if step is None or contract is None:
            return result
        from ._person_results import ResultContract

        try:
            return ResultContract.from_json(contract).shape(result)
        except ValueError as exc:
            raise InvalidResolution(
                f"not a result of {step.tool!r}: {exc}", run_id=run_id, step_id=step_id,
                key=step.key,
            ) from None  # fmt: skip

    def declare_result(
        self, tool: str, schema: dict[str, Any] | None = None, *, form: Form = "json"
    ) -> None:
        """Store what a person's result for ``tool`` must look like, so that ``resolve``
        checks it in whatever process a person decides in: a value matching the JSON
        Schema ``schema`` (``form="json"``), or an MCP tool result (``form="mcp"``,
        ``schema`` the tool's output schema). A tool's ``result_schema=`` is declared at
        its first use; stored once per process."""
        declared = self._declared_results.get(tool)
        if declared is not None and declared[0] is schema and declared[1] == form:
            return  # a tool's own schema, asked at each of its steps: encoded once
        from ._person_results import ResultContract

        stored = ResultContract(form, schema).to_json()
        if declared is None or declared[2] != stored:
            self.store.set_result_contract(tool, stored)
        self._declared_results[tool] = (schema, form, stored)

    # -- budgets ------------------------------------------------------------------------

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        """A run's budget (None without one) and what the run has used of it."""
        return self.store.budget_usage(run_id)

    def set_budget(self, run_id: str, budget: Budget | None, *, by: str) -> None:
        """Change a run's budget (raise it to let a stopped run go on); journalled."""
        _check_decision("set_budget", by, None, run_id)
        self.store.set_budget(run_id, budget, by=by)

    def agent_budgets(self) -> list[AgentBudgetSetting]:
        """Every agent's daily budget as it stands, by agent, with who set it and when."""
        return self.store.agent_budgets()

    def set_agent_budget(self, agent: str, budget: AgentBudget | None, *, by: str) -> None:
        """Daily limits for every run started with ``agent=agent`` together; checked in
        each effect's intent transaction. ``None`` removes them. Journalled."""
        check_name(agent, "agent")
        _check_decision("set_agent_budget", by, None)
        self.store.set_agent_budget(agent, budget, by=by)

    # -- approvals ----------------------------------------------------------------------

    def approve(
        self,
        run_id: str,
        step_id: str,
        *,
        by: str,
        request: int | None = None,
        args_hash: str | None = None,
        expires_in: timedelta | float | None = None,
        note: str | None = None,
        args: dict[str, Any] | str | None = None,
        link: str | None = None,
    ) -> Approval:
        """Approve one pending request of a step, for exactly the arguments it was made
        with, once: the next attempt uses it up. ``expires_in`` bounds how long it holds.

        ``args`` (a dict, or its JSON text) approves an edited call instead: every
        parameter the call needs, by name, as ``approvals`` shows the request. The request
        becomes ``edited`` and a new approved request holds the edited call, which the
        step runs under its own idempotency key; the code receives its result. Refused
        with ``InvalidPayload`` if it is not JSON, names a parameter the tool does not
        take, leaves out one it needs, or changes a secret field. Returns the new request.

        Name the request you read by its id (``request``) and/or its ``args_hash``;
        naming neither is refused (``UnknownApproval``) once the step was asked with more
        than one set of arguments, and a request superseded by a newer one can no longer
        be decided. ``link`` is the nonce of the notice's signed link the decision is made through
        (``DecisionLink.nonce``): the decision takes it in its own transaction, and a link
        that decided already is refused (``LinkUsed``): a link decides once."""
        _check_decision("approve", by, note, run_id, step_id)
        _check_link(link)
        seconds = None if expires_in is None else numbers.seconds(expires_in, "expires_in")
        _check_request(request)
        edited = None if args is None else self._edited_args(args, run_id, step_id)
        return self.store.decide_approval(
            run_id, step_id, ApprovalStatus.APPROVED, by=by, expires_in=seconds, note=note,
            request=request, args_hash=args_hash, edited=edited, link=link,
        )  # fmt: skip

    def _edited_args(self, args: object, run_id: str, step_id: str) -> dict[str, Any]:
        """A person's edited arguments, decoded and held to the ledger's payload limit."""
        where = {"run_id": run_id, "step_id": step_id}
        if isinstance(args, str):
            try:
                args = decode(args)
            except ValueError as exc:
                raise InvalidPayload(f"the edited arguments are not JSON: {exc}", **where) from None
        if not isinstance(args, dict):
            raise InvalidPayload(
                f"edited arguments must be a JSON object of parameter names, not {args!r:.80}",
                **where,
            )
        encode(args, what="edited arguments", limit=self.max_payload_bytes)
        return args

    def approval_edits(self, run_id: str, step_id: str) -> list[ApprovalEdit]:
        """The edits people approved of a step's requests, oldest first, as journalled."""
        return list(self.store.approval_history(run_id, step_id).edits)

    def editable_arguments(self, approval: Approval) -> dict[str, Any] | None:
        """``approval``'s call by parameter name, as ``approve(..., args=...)`` takes it;
        None if its tool's calls cannot be edited (``*args``, ``**kwargs``, or a request
        journalled before edits were possible)."""
        from .records._argument_edits import named

        history = self.store.approval_history(approval.run_id, approval.step_id)
        shape = history.shapes.get(approval.id)
        return None if shape is None else named(decode(shape), decode(approval.args_json))

    def deny(
        self,
        run_id: str,
        step_id: str,
        *,
        by: str,
        request: int | None = None,
        args_hash: str | None = None,
        note: str | None = None,
        link: str | None = None,
    ) -> Approval:
        """Deny one pending request of a step (named as for ``approve``): the agent gets
        ``ApprovalDenied`` there, now and on every replay, for those arguments. ``link``
        as for ``approve``."""
        _check_decision("deny", by, note, run_id, step_id)
        _check_link(link)
        _check_request(request)
        return self.store.decide_approval(
            run_id, step_id, ApprovalStatus.DENIED, by=by, expires_in=None, note=note,
            request=request, args_hash=args_hash, link=link,
        )  # fmt: skip

    def approvals(
        self, status: ApprovalStatus | str | None = "pending", *, limit: int = 100
    ) -> list[Approval]:
        """Approval requests, newest first (by default the pending ones)."""
        chosen = None if status is None else ApprovalStatus(status)
        return self.store.approvals(chosen, numbers.count(limit, "limit"))

    # -- the kill switch ----------------------------------------------------------------

    def halt(
        self,
        reason: str,
        *,
        by: str,
        run: str | None = None,
        agent: str | None = None,
        ahead: bool = False,
    ) -> Halt:
        """Turn a durable kill switch on: for one ``run``, every run of an ``agent``, or,
        with neither, every run. From then on no new step of a covered run starts (it
        raises ``RunHalted``, exit code 3), in this process or any other, across restarts,
        until a person clears it. ``by`` names who or what set it (a person, a detector).
        A run or agent the ledger has never seen is refused (``UnknownRun``,
        ``UnknownAgent``: a typo would stop nothing) unless ``ahead=True`` says the switch
        is set ahead of its first start."""
        scope, target = _switch(run, agent)
        if not reason or not by:
            raise ConfigurationError("a halt needs a reason and by=... naming who set it")
        _check_decision("halt", by, reason)
        return self.store.set_halt(scope, target, reason=reason, by=by, ahead=ahead)

    def clear_halt(
        self,
        *,
        by: str,
        run: str | None = None,
        agent: str | None = None,
        note: str | None = None,
        link: str | None = None,
        switch: int | None = None,
    ) -> Halt:
        """Turn a kill switch off. Only a person should: ``by`` names them, and it is
        recorded with the halt and in the journal. ``UnknownHalt`` if it is not on, or if
        ``switch`` (its number, as ``halts`` lists it) names another than the one on.
        ``link`` as for ``approve`` (a link clears a run's own switch only, the one its
        notice named)."""
        scope, target = _switch(run, agent)
        _check_decision("clear_halt", by, note)
        _check_link(link)
        if link is not None and scope is not HaltScope.RUN:
            raise ConfigurationError("a decision link clears a run's own kill switch only")
        return self.store.clear_halt(scope, target, by=by, note=note, link=link, switch=switch)

    def used_link(self, nonce: str) -> UsedLink | None:
        """What the notice's link ``nonce`` (``DecisionLink.nonce``) decided, by whom and
        when; None while it decided nothing."""
        return self.store.used_link(nonce)

    def halts(self, *, active_only: bool = True, limit: int = 100) -> list[Halt]:
        """Kill switches, newest first; with ``active_only=False`` the cleared ones too."""
        return self.store.halts(active_only=active_only, limit=numbers.count(limit, "limit"))

    def holds(self, *, limit: int = 100) -> list[HoldRecord]:
        """Every resource a run holds or held last (``run.hold``), by name, with its state."""
        return self.store.holds(limit)

    def release_hold(self, name: Any, *, by: str, why: str, force: bool = False) -> HoldRecord:
        """Free a hold a run cannot give up itself (its process is gone, or an effect it
        began under the hold is in doubt and a person judged the resource safe). Refused
        with ``ResourceHeld`` while the holder's lease runs, unless ``force``;
        ``UnknownHold`` if nobody holds it. Journalled in the holder's run."""
        from .runtime._holds import resource_name

        resource = resource_name(name)
        _check_decision("release_hold", by, why)
        if not why:
            raise ConfigurationError("release_hold(..., why=...) must say why")
        return self.store.release_hold(resource, by=by, why=why, force=force)


def _resolution(value: Resolution | str, run_id: str, step_id: str) -> Resolution:
    try:
        return Resolution(value)
    except ValueError:
        raise InvalidResolution(
            f"{value!r} is not a resolution; use one of {[r.value for r in Resolution]}",
            run_id=run_id,
            step_id=step_id,
        ) from None


def _check_attempt(attempt: int | None, run_id: str, step_id: str) -> None:
    """An attempt is counted from 1; anything else names none a person could have seen."""
    if attempt is None or (type(attempt) is int and attempt >= 1):
        return
    raise InvalidResolution(
        f"attempt must be a whole number from 1 (an attempt of the step), not {attempt!r}",
        run_id=run_id, step_id=step_id,
    )  # fmt: skip


def _switch(run: str | None, agent: str | None) -> tuple[HaltScope, str]:
    if run is not None and agent is not None:
        raise ConfigurationError("a kill switch is for one run or one agent, not both")
    if run is not None:
        return HaltScope.RUN, check_name(run, "run")
    if agent is not None:
        return HaltScope.AGENT, check_name(agent, "agent")
    return HaltScope.GLOBAL, ""


def _check_decision(
    verb: str, by: str, text: str | None, run_id: str | None = None, step_id: str | None = None
) -> None:
    """What every change a person (or code) makes gives: who, and what it is about."""
    if not by:
        raise ConfigurationError(f"{verb}(..., by=...) must name who decides", run_id=run_id)
    if run_id is not None:
        check_name(run_id, "run_id")
    if step_id is not None:
        check_name(step_id, "step_id", run_id=run_id)
    check_text(by, "by", run_id=run_id, step_id=step_id)
    check_text(text, "the note" if verb != "halt" else "the reason", run_id=run_id)


def _check_link(link: str | None) -> None:
    if link is not None and not (isinstance(link, str) and 0 < len(link) <= MAX_NONCE_CHARS):
        raise ConfigurationError(
            f"link must be a decision link's nonce (DecisionLink.nonce), not {link!r:.80}"
        )


def _check_request(request: int | None) -> None:
    """A request id, if one is named, is a stored row's id."""
    if request is not None:
        numbers.count(request, "request", least=1)
