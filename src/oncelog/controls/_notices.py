"""Telling people that a run needs them, once per halt or approval request.

When a run stops for a person, a ``PersonNeeded`` notice goes to the ledger's ``on_alert``
callback and its ``alert_webhook``: the channel budget alerts use. Each notice has an id
that names what the person must decide (the kill switch, the approval request, the
attempt of the effect in doubt or held by a preflight conflict), so a process that stops
again on the same thing (a crash loop, a supervisor restarting it) sends nothing new. The
notice is journalled before it is delivered and its delivery confirmed after: a crash
between the two, or a delivery that failed, delivers it again at the next stop (a process
that waits for the decision tries again every ``REDELIVER_EVERY`` seconds), so it is
delivered at least once, and a receiver that must page exactly once deduplicates by
``id``. Budget stops keep their budget alerts and send no notice.

A run blocked by another run's effect in doubt, whose run no live process holds (a
``SubjectInDoubt``, a ``HoldInDoubt``: a LangGraph message sent again on a thread whose
tool node was killed), waits on that effect's decision, not on one of its own: its notice
is the blocking effect's (``run_id``, ``step_id``, tool, key and decision links are the
holder's, ``blocked_run`` the run that waits), with the id of that effect's attempt in
doubt, journalled under the holder's run. However many runs, and restarts of them, meet
it, and when the holder itself halts on it, one notice is sent for one decision.

A notice carries what the person must see to decide: the effect's tool, its recorded
arguments (declared secrets are keyed hashes already; credentials nobody declared are
masked as every surface masks them), its key, why it stopped, where to look it up at the
provider (the tool's ``evidence_url``), and, once the ledger knows its console
(``notify_console_url``), one signed link per decision (``_links.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .._exceptions import (
    AmbiguousOutcome,
    ApprovalRequired,
    EffectRefused,
    HoldInDoubt,
    NeedsPerson,
    OnceLogError,
    PreflightConflict,
    RunHalted,
    SubjectInDoubt,
    WaitingForPerson,
    _OverBudget,
)
from .._log import log
from .._webhook import post_json
from ..records._budgets import BudgetAlert
from ..records._display import printable, redact, visible
from ..records._evidence_url import fill
from ..records._records import ApprovalStatus, HaltScope
from ..records._value import Value, as_dict
from ..stores._protocol import Store
from ._alerts import AlertCallback

if TYPE_CHECKING:
    from ._links import LinkSigner


class PersonNeeded(Value):
    """A run stopped until a person decides, as handed to ``on_alert`` and posted to the
    ``alert_webhook``. ``id`` is the same for every notice about one decision."""

    id: str
    kind: Literal["halted", "waiting", "failed"]  # exit 3, exit 4, or a refusal's exit 1
    error: str  # what stopped it: AmbiguousOutcome, RunHalted, ApprovalRequired...
    run_id: str
    step_id: str | None
    message: str
    tool: str | None = None  # the effect's tool, if a step stopped it
    key: str | None = None  # its idempotency key
    args: Any = None  # its recorded arguments, credentials masked
    attempt: int | None = None  # the attempt in doubt, or the approval request's id
    reason: str | None = None  # why its outcome is unknown, as recorded
    evidence_url: str | None = None  # where to look it up at the provider
    links: dict[str, str] | None = None  # decision -> signed console link
    blocked_run: str | None = None  # a run that waits on this effect, blocked by its doubt

    def to_json(self) -> str:
        """As posted to a webhook."""
        return json.dumps({**as_dict(self), "event": "oncelog.person.needed"}, sort_keys=True)

    def journalled(self) -> str:
        """As journalled: without its links. Each is a capability for one decision, and a
        journal is read, exported and shipped far wider than the channel that pages."""
        return json.dumps(
            {**as_dict(self), "links": None, "event": "oncelog.person.needed"}, sort_keys=True
        )


AnyAlertCallback = Callable[[BudgetAlert | PersonNeeded], None]


class Notices:
    """The ledger's channel to people: its ``on_alert`` callback and ``alert_webhook``."""

    def __init__(
        self,
        store: Store,
        callback: AnyAlertCallback | None,
        webhook: str | None,
        signer: LinkSigner | None = None,
    ) -> None:
        self.store = store
        self.callback = callback
        self.webhook = webhook
        self.signer = signer
        self.evidence: dict[str, str] = {}  # tool -> its evidence_url, as runs use them
        self._undelivered: dict[str, PersonNeeded] = {}  # by id: tried again by redeliver

    def budget_callback(self, on_budget_alert: AlertCallback | None) -> AlertCallback | None:
        """What a run calls with its budget alerts: ``on_budget_alert`` and ``on_alert``."""
        callbacks = [c for c in (on_budget_alert, self.callback) if c is not None]
        if len(callbacks) < 2:
            return callbacks[0] if callbacks else None

        def both(alert: BudgetAlert) -> None:
            for callback in callbacks:
                callback(alert)

        return both

    def stopped(self, exc: BaseException | None, run_id: str, agent: str | None) -> None:
        """If ``exc`` stopped the run for a person, tell them (once). Never raises: the
        run's own course does not depend on anyone receiving the notice."""
        if not isinstance(exc, (NeedsPerson, WaitingForPerson, EffectRefused)):
            return
        if isinstance(exc, _OverBudget):
            return
        try:
            blocked = _blocking(exc)
            about, step = (run_id, exc.step_id) if blocked is None else blocked
            identity = self._identify(exc, about, step, agent)
            kind: Literal["halted", "waiting", "failed"] = (
                "halted" if isinstance(exc, NeedsPerson)
                else "failed" if isinstance(exc, EffectRefused) else "waiting"
            )  # fmt: skip
            notice = PersonNeeded(
                identity, kind,
                type(exc).__name__, about, step, exc.message,
                **self._details(identity, about, step),
                blocked_run=None if blocked is None else run_id,
            )  # fmt: skip
            if self.store.record_notice(about, notice.id, notice.journalled()):
                self._deliver(notice)
        except OnceLogError as exc_store:
            log.warning("the notice that run %s needs a person failed: %s", run_id, exc_store)

    def moved_to(self, store: Store) -> Notices:
        """The same channel, and the notices still to deliver, over another store (the
        ledger was closed and its URL opened again)."""
        moved = Notices(store, self.callback, self.webhook, self.signer)
        moved.evidence = self.evidence
        moved._undelivered = self._undelivered
        return moved

    def redeliver(self) -> None:
        """Try again the notices whose delivery failed in this process (a process that
        waits for a person calls it now and then: it has no next stop to try them at)."""
        for notice in list(self._undelivered.values()):
            try:
                if self.store.record_notice(notice.run_id, notice.id, notice.journalled()):
                    self._deliver(notice)
                else:
                    self._undelivered.pop(notice.id, None)  # another process delivered it
            except OnceLogError as exc:
                log.warning("the notice %s was not delivered again: %s", notice.id, exc)

    def _identify(
        self, exc: OnceLogError, run_id: str, step_id: str | None, agent: str | None
    ) -> str:
        """The id of what the person must decide: about ``step_id`` of ``run_id``, the
        blocking effect's for a run blocked by another's doubt."""
        step = step_id or ""
        if isinstance(exc, RunHalted):
            halt = self.store.active_halt(run_id, agent)
            if halt is not None:  # an agent's or the global switch stops many runs
                return f"halt:{halt.id}:{run_id}"
        elif isinstance(exc, ApprovalRequired):
            for approval in self.store.approvals(ApprovalStatus.PENDING, 1000):
                if (approval.run_id, approval.step_id) == (run_id, step):
                    return f"approval:{approval.id}"
        elif isinstance(exc, EffectRefused):
            # A person's retry counts the attempts from zero again: the latest attempt's
            # start tells a refusal after a retry from the one the retry answered, so the
            # new refusal gets its own notice, and links (the old ones decided once).
            for record in self.store.steps(run_id, 0, 1 << 30):
                if record.step_id == step:
                    started = f"{record.started_at:.6f}"  # the attempt number stays last
                    return f"refused:{run_id}:{step}:{started}:{record.attempts}"
        elif isinstance(exc, (AmbiguousOutcome, PreflightConflict, SubjectInDoubt, HoldInDoubt)):
            # A conflict marks its attempt unknown, as a crash does: one decision for
            # both, and the attempt makes the conflict after a person's not_done new. A
            # run blocked by that attempt waits on the same decision: the same id.
            for record in self.store.steps(run_id, 0, 1 << 30):
                if record.step_id == step:
                    return f"unknown:{run_id}:{step}:{record.attempts}"
        return f"{type(exc).__name__}:{run_id}:{step}"

    def _details(self, identity: str, run_id: str, step_id: str | None) -> dict[str, Any]:
        """What the person must see of the thing ``identity`` names, and its links."""
        what, _, rest = identity.partition(":")
        if what == "halt":
            rest = rest.partition(":")[0]  # the switch's number, before the run id
            # A link clears a run's own switch only: an agent's or the global one stops
            # more than this run, and is cleared on purpose, at the halts page or the CLI.
            halts = self.store.halts(active_only=True, limit=1000)
            own = [h for h in halts if h.id == int(rest) and h.scope is HaltScope.RUN]
            return {"links": self._links("resume", run_id, "", int(rest))} if own else {}
        if what == "approval":
            found = [a for a in self.store.approvals(ApprovalStatus.PENDING, 1000)
                     if a.id == int(rest)]  # fmt: skip
            if not found:
                return {}
            request = found[0]
            details = self._step(run_id, request.step_id)
            details.update(tool=request.tool, args=_masked(request.args_json), attempt=request.id)
            details["links"] = self._links(
                "approval", run_id, request.step_id, request.id, request.args_hash
            )
            return details
        if what in ("unknown", "refused"):
            details = self._step(run_id, step_id or "")
            attempt = int(rest.rpartition(":")[2])
            action: Literal["resolve", "retry"] = "resolve" if what == "unknown" else "retry"
            details["links"] = self._links(action, run_id, step_id or "", attempt)
            return details
        return self._step(run_id, step_id) if step_id else {}

    def _step(self, run_id: str, step_id: str) -> dict[str, Any]:
        for record in self.store.steps(run_id, 0, 1 << 30):
            if record.step_id == step_id:
                template = self.evidence.get(record.tool)
                return {
                    "tool": record.tool, "key": record.key, "args": _masked(record.args_json),
                    "attempt": record.attempts, "reason": record.reason,
                    "evidence_url": None if template is None
                    else fill(template, record.key, run_id, step_id),
                }  # fmt: skip
        return {}

    def _links(
        self, action: Literal["resolve", "approval", "resume", "retry"], run_id: str, step_id: str,
        number: int, args_hash: str = "",
    ) -> dict[str, str] | None:  # fmt: skip
        if self.signer is None:
            return None
        return self.signer.links(action, run_id, step_id, number, args_hash)

    def _deliver(self, notice: PersonNeeded) -> None:
        log.warning("run %s needs a person: %s", visible(notice.run_id), printable(notice.message))
        delivered = True
        if self.callback is not None:
            try:
                self.callback(notice)
            except Exception:
                log.exception("the on_alert callback failed for %s", notice.id)
                delivered = False
        if self.webhook is not None:
            delivered = post_json(self.webhook, notice.to_json(), notice.message) and delivered
        if not delivered:
            self._undelivered[notice.id] = notice
            return
        self._undelivered.pop(notice.id, None)
        self.store.confirm_notice(notice.run_id, notice.id)


def _blocking(exc: OnceLogError) -> tuple[str, str] | None:
    """The run and step of another run's effect in doubt that ``exc`` is blocked by."""
    if isinstance(exc, SubjectInDoubt) and exc.held_by_run and exc.held_by_step:
        return exc.held_by_run, exc.held_by_step
    if isinstance(exc, HoldInDoubt) and exc.holder and exc.held_by_step:
        return exc.holder, exc.held_by_step
    return None


def _masked(args_json: str) -> Any:
    try:
        return redact(json.loads(args_json))
    except ValueError:
        return None
