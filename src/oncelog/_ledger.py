"""The facade users meet: open a ledger, declare tools, run agents, resolve what is in doubt.

What people decide (resolutions, approvals, budgets, kill switches) is ``Ledger``'s base,
``_person_decisions.PersonDecisions``; running agents and reading the ledger are here."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from . import _numbers as numbers
from ._exceptions import ConfigurationError, OnceLogError, RunPruned, UnknownRun
from ._lazy import defer
from ._log import log
from ._person_decisions import PersonDecisions
from .audit import _pages as pages
from .process import _leases as leases
from .process import _main as main
from .process._heartbeat import HEARTBEATS
from .records._budgets import Budget
from .records._records import (
    Checkpoint,
    EffectInDoubt,
    JournalEntry,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
    SubjectClaim,
)
from .records._serialization import encode
from .runtime._names import check_name, check_text
from .stores import DEFAULT_PATH, Lease, Store, open_store

# The engine (``runtime/``: effects, retries, probes, tools) is imported by the first run
# or tool declaration, and what comes next for a run (``_next``) by the first question
# about it (``_lazy``), not by ``open()``: a process that opens a ledger to read it, or a
# CLI command, does not pay for the engine, and an agent pays for it at its first step.
# The engine's modules a run's start uses are module globals bound at their first use
# (``_lazy``), not imports inside ``run`` and ``start_run``: a relative import in a
# function resolves its package at every call (the module spec's ``parent`` in Python and
# a formatted name in C), five per run, which made a run's start and end cost ~12% more
# instructions than before they moved there (docs/benchmarks.md, Instructions).
if TYPE_CHECKING:
    from pathlib import Path

    from . import _next as next_steps
    from .audit._prune import PruneReport
    from .audit._prune_archive import ArchiveReport
    from .audit._signing import Signer
    from .audit._verify import Report
    from .controls._alerts import AlertCallback
    from .controls._links import DecisionLink, LinkSigner
    from .controls._notices import AnyAlertCallback, Notices
    from .controls._waiting import Waiter
    from .records._retention import LedgerSize
    from .runtime import _effects as effects
    from .runtime import _replay as replay
    from .runtime import _run as run_contexts
    from .runtime import _run_options as run_options
    from .runtime import _stops as stops
    from .runtime._calls import Surroundings
    from .runtime._effects import Engine
    from .runtime._run import RunContext
    from .runtime._run_options import PlanArg, RunOptions
    from .runtime._tools import tool as _tool
else:
    defer(
        globals(), next_steps="._next", effects=".runtime._effects", replay=".runtime._replay",
        run_contexts=".runtime._run", run_options=".runtime._run_options", stops=".runtime._stops",
    )  # fmt: skip

# The most runs one ``claim_many`` takes: one owner is made for each before the claim.
MOST_CLAIMED = 10_000
# Why a run given back unstarted is queued (``release_claim``): a drain's reason, as
# ``runtime/_run`` writes it for a run stopped by one.
UNSTARTED = (
    "Draining: this process is shutting down; the run was claimed but not started, "
    "and is queued for another worker"
)


class Ledger(PersonDecisions):
    """A handle on one store. Thread-safe; open one per process and pass it around."""

    def __init__(
        self,
        store: Store,
        *,
        lease_ttl: float = 30.0,
        max_payload_bytes: int = 1 << 20,
        approval_poll: float = 1.0,
        key_namespace: str = "",
        on_budget_alert: AlertCallback | None = None,
        signer: Signer | None = None,
        redaction_key: bytes | None = None,
        on_alert: AnyAlertCallback | None = None,
        alert_webhook: str | None = None,
        url: str | None = None,
        link_signer: LinkSigner | None = None,
    ) -> None:
        numbers.seconds(lease_ttl, "lease_ttl")
        numbers.count(max_payload_bytes, "max_payload_bytes", least=1)
        numbers.seconds(approval_poll, "approval_poll")
        self.store = store
        # The process's drain flag, heartbeats and observers, handed to each run's engine
        # (made at the first run, with the engine's modules).
        self._surroundings: Surroundings | None = None
        self.lease_ttl = lease_ttl
        self.max_payload_bytes = max_payload_bytes
        self.approval_poll = approval_poll  # seconds between looks, while async code waits
        self.key_namespace = key_namespace
        self.on_budget_alert = on_budget_alert
        self.url = url  # what the store was opened from, if it was opened from a URL
        self.closed = False
        # Where notices go, and the channel to people made from it at first use
        # (``_people``): an open that runs nothing imports none of ``controls/``.
        self._alerting = (on_alert, alert_webhook, link_signer)
        self._people_made: tuple[Notices, Waiter] | None = None
        self._making_people = threading.Lock()
        self.signer = signer  # signs a checkpoint of each run's chain when the run ends
        self._redaction_key = redaction_key
        self._stamp_key: bytes | None = None
        # tool -> (schema object, form, contract) this process stored
        self._declared_results: dict[str, tuple[object, str, str]] = {}
        # Said once, at the first run: a ledger this process made holds nothing another
        # process recorded (a replica with its own file), and which ledger run_main uses.
        self._new_here = store.created
        self._said_where = False
        if store.created:
            from .records._display import printable

            log.info("created a new ledger at %s", printable(store.where))

    @property
    def notices(self) -> Notices:
        """The ledger's channel to people: its ``on_alert`` and ``alert_webhook``."""
        return self._people()[0]

    @property
    def waiter(self) -> Waiter:
        """How the ledger waits for a person's decision on one of its runs."""
        return self._people()[1]

    def _people(self) -> tuple[Notices, Waiter]:
        """The notices and the waiter, made once, by the first thread that asks."""
        made = self._people_made
        if made is None:
            from .controls._notices import Notices
            from .controls._waiting import Waiter

            with self._making_people:
                if self._people_made is None:
                    notices = Notices(self.store, *self._alerting)
                    waiter = Waiter(self.store, self.url, self.approval_poll, notices)
                    waiter.closed = self.closed
                    self._people_made = (notices, waiter)
                made = self._people_made
        return made

    # -- declaring tools ----------------------------------------------------------------

    # Tools belong to no ledger: ``oncelog.tool`` is the same decorator, for modules that
    # declare tools before any ledger is open (a worker's handlers).
    if TYPE_CHECKING:
        tool = staticmethod(_tool)
    else:

        @staticmethod
        def tool(*args: Any, **kwargs: Any) -> Any:
            from .runtime._tools import tool

            return tool(*args, **kwargs)

    @property
    def surroundings(self) -> Surroundings:
        """What the engine needs from the process (drain flag, heartbeats, observers,
        clocks); a test replaces it (``oncelog.testing.use_clock``)."""
        if self._surroundings is None:
            from .runtime._calls import Surroundings

            self._surroundings = Surroundings()
        return self._surroundings

    @surroundings.setter
    def surroundings(self, value: Surroundings) -> None:
        self._surroundings = value

    # -- running ------------------------------------------------------------------------

    def run(
        self,
        run_id: str,
        *,
        plan: PlanArg = None,
        replace_plan: bool = False,
        create: bool = True,
        agent: str | None = None,
        budget: Budget | None = None,
        origin: str | None = None,
    ) -> RunContext:
        """Start or resume the run named ``run_id``: take it from outside the process (the
        Job name, the queue message id, the ticket id), never from a fresh UUID.

        ``plan`` (a list of step ids, or a function returning one, called only when the
        run has no plan yet) is stored before the first step. A different plan for an
        existing run raises ``PlanMismatch`` unless ``replace_plan``. With ``create=False``
        an unknown ``run_id`` raises ``UnknownRun``. ``agent`` names the scope the run
        belongs to (its kill switch covers the run); it is fixed when the run is created.
        ``budget`` is stored when the run is created and ignored afterwards, so that no
        restart resets it; ``set_budget`` is how a person changes it. ``origin`` says what
        started the run, journalled with its lease so that ``what_next`` names the one way
        to start it again; the integrations set it (``celery``, ``temporal``, ``dbos``,
        ``langgraph:THREAD``, ``mcp``), code that runs its agent itself leaves it out."""
        check_name(run_id, "run_id")
        if agent is not None:
            check_name(agent, "agent", run_id=run_id)
        if origin is not None and not isinstance(origin, str):
            raise ConfigurationError(f"origin must be a str, not {type(origin).__name__}")
        plain = plan is None and not replace_plan and create and agent is None
        if plain and budget is None and origin is None:
            return run_contexts.RunContext(self, run_id, run_options.PLAIN)
        options = run_options.RunOptions(plan, replace_plan, create, agent, budget, origin=origin)
        return run_contexts.RunContext(self, run_id, options)

    def submit(
        self,
        run_id: str,
        input: Any = None,
        *,
        agent: str | None = None,
        plan: Sequence[str] | None = None,
        budget: Budget | None = None,
    ) -> bool:
        """Queue a run for workers (``oncelog worker``), with the ``input`` its handler
        gets; True if it is new. Submitting the same run id with the same agent and input
        again (a redelivered message) changes nothing; other input raises
        ``InputMismatch``."""
        check_name(run_id, "run_id")
        if agent is not None:
            check_name(agent, "agent", run_id=run_id)
        input_json = encode(input, what="input", limit=self.max_payload_bytes)
        return self.store.submit(
            run_id, agent=agent, input_json=input_json,
            plan=None if plan is None else tuple(plan), budget=budget,
        )  # fmt: skip

    def claim(self, agents: Sequence[str | None] | None = None) -> RunContext | None:
        """Take the lease of a runnable submitted run (of one of ``agents``, None standing
        for runs of no agent; of any agent without them), ready to be entered; or None.
        What ``oncelog worker`` does between runs."""
        claimed = self.claim_many(agents, 1)
        return claimed[0] if claimed else None

    def claim_many(
        self, agents: Sequence[str | None] | None = None, limit: int = 1
    ) -> list[RunContext]:
        """``claim`` for up to ``limit`` runs (1 to 10,000) in one transaction, each with
        a lease of its own: what ``oncelog worker --concurrency N`` does for its free
        slots. A run claimed but never entered is given back with ``release_claim``."""
        limit = numbers.count(limit, "limit", least=1, most=MOST_CLAIMED)
        if agents is not None:
            agents = tuple(agents)
        owners = [leases.new_owner() for _ in range(limit)]
        claimed: list[tuple[Lease, RunRecord]] = []
        try:
            claimed = self.store.claim_many(
                owners=owners, ttl=self.lease_ttl, agents=agents, owner_is_dead=leases.is_dead
            )
        finally:
            for owner in owners[len(claimed) :]:
                leases.forget(owner)
        return [
            run_contexts.RunContext(self, c[0].run_id, run_options.RunOptions(claimed=c))
            for c in claimed
        ]

    def release_claim(self, context: RunContext) -> None:
        """Queue again at once a run claimed (``claim_many``) whose handler will not start
        (this process is draining), as a drain queues a run it holds, rather than leave
        it to another worker once its lease runs out. A store that cannot be reached
        leaves it to that: the owner is forgotten, which this host's workers see at once."""
        lease = context.claimed_lease
        try:
            self.store.finish(lease, RunStatus.QUEUED, UNSTARTED, "Draining")
        except OnceLogError as exc:
            log.warning("could not give back run %s: %s", lease.run_id, exc)
        finally:
            leases.forget(lease.owner)

    def start_run(self, run_id: str, options: RunOptions) -> tuple[Engine, RunRecord]:
        """What entering ``run(...)``'s context does (``RunContext``): take the run's
        lease, or the one a worker claimed, and make the engine of its steps. Not for an
        agent's code: enter ``ledger.run(...)``."""
        if self._new_here or (main.RUNNING[0] and not self._said_where):
            self._say_where(run_id)
        if options.claimed is not None:
            lease, record = options.claimed
        else:
            lease, record = self._acquire(run_id, options)
        cursor = replay.ReplayCursor(self.store, run_id, record.next_seq)
        stop = None
        if record.stop_seq is not None and record.stop_json is not None:
            stop = stops.Stop.from_row(record.stop_seq, record.stop_json)
        engine = effects.Engine(
            self.store, lease, cursor, record.plan, self.max_payload_bytes, self.key_namespace,
            on_budget_alert=self.notices.budget_callback(self.on_budget_alert),
            surroundings=self.surroundings, stop=stop,
        )  # fmt: skip
        HEARTBEATS.hold(self.store, lease)
        return engine, record

    def _say_where(self, run_id: str) -> None:
        from .records._display import printable, visible

        if self._new_here:
            log.warning(
                "run %s starts in a new ledger this process created at %s: it holds "
                "nothing that another process recorded. Unless that is meant, give every "
                "replica and restart of the agent one ledger (ONCELOG_URL)",
                visible(run_id), printable(self.store.where),
            )  # fmt: skip
        else:
            log.info("run %s uses the ledger at %s", visible(run_id), printable(self.store.where))
        self._new_here, self._said_where = False, True

    def _acquire(self, run_id: str, options: RunOptions) -> tuple[Lease, RunRecord]:
        stored = self._resolve_plan(run_id, options.plan)
        owner = leases.new_owner()
        try:
            return self.store.acquire(
                run_id,
                owner=owner,
                ttl=self.lease_ttl,
                plan=stored,
                replace_plan=options.replace_plan,
                create=options.create,
                owner_is_dead=leases.is_dead,
                agent=options.agent,
                budget=options.budget,
                origin=options.origin,
            )
        except BaseException:
            leases.forget(owner)
            raise

    def _resolve_plan(self, run_id: str, plan: PlanArg) -> tuple[str, ...] | None:
        if callable(plan):
            try:
                existing = self.store.get_run(run_id).plan
            except UnknownRun:
                existing = None
            plan = existing if existing is not None else plan()
        if plan is None:
            return None
        steps = tuple(plan)
        if not all(isinstance(s, str) and s for s in steps) or len(set(steps)) != len(steps):
            raise ConfigurationError(f"a plan is a list of distinct non-empty step ids: {steps}")
        for step_id in steps:
            check_name(step_id, "a plan's step id", run_id=run_id)
        return steps

    # -- reading ------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        return self.store.get_run(run_id)

    def runs(self, status: RunStatus | str | None = None, *, limit: int = 100) -> list[RunRecord]:
        chosen = None if status is None else RunStatus(status)
        return self.store.list_runs(chosen, numbers.count(limit, "limit"))

    def steps(self, run_id: str, *, start: int = 0) -> list[StepRecord]:
        """Every recorded step of a run, in order; with ``start``, those at positions
        from ``start`` on."""
        self.store.get_run(run_id)
        out: list[StepRecord] = []
        while True:
            page = self.store.steps(run_id, out[-1].seq + 1 if out else start, 1000)
            out.extend(page)
            if len(page) < 1000:
                return out

    def step(self, run_id: str, step_id: str) -> StepRecord | None:
        """The step recorded under ``step_id`` in the run, read alone however many the
        run holds; None if there is none (or no such run)."""
        return self.store.step_named(run_id, step_id)

    def subjects(self, run_id: str | None = None, *, limit: int = 100) -> list[SubjectClaim]:
        """The subjects (``once_per``) claimed in the ledger, or only by ``run_id``'s steps,
        each with the step that holds it and that step's state, latest claim first."""
        return self.store.subjects(run_id, limit)

    def in_doubt(self, *, limit: int = 100) -> list[StepRecord]:
        """Effects whose outcome is unknown or not yet recorded, oldest first."""
        limit = numbers.count(limit, "limit")
        return [doubt.step for doubt in self.store.effects_in_doubt(limit)]

    def effects_in_doubt(self, *, limit: int = 100) -> list[EffectInDoubt]:
        """``in_doubt()`` with who may still be running each effect: an in-flight effect
        whose run's lease has lapsed (by the store's clock) is orphaned, since nobody is
        running it; each comes with the lease's last owner and its age."""
        found = self.store.effects_in_doubt(numbers.count(limit, "limit"))
        # A lease owner certainly gone (a SIGKILLed process on this host) runs nothing,
        # though its lease has not lapsed yet: as ``resolve`` and a restart see it.
        return [
            d._replace(orphaned=True)
            if d.step.state is StepState.IN_FLIGHT and not d.orphaned
            and d.lease_owner is not None and leases.is_dead(d.lease_owner)
            else d
            for d in found
        ]  # fmt: skip

    def what_next(self, run_id: str) -> list[str]:
        """What happens next for the run, in words a person acts on: the first line says
        what the run does by itself; any others are the commands, arguments filled in,
        that move it (``oncelog show`` prints them, the console shows them)."""
        return next_steps.what_next(self, run_id)

    def waiting_in_place(self, run_id: str) -> next_steps.Waiter | None:
        """The process that waits in place for a person's decision on the run
        (``run_main(wait_for_person=...)``), if one does: it goes on by itself once the
        run is decided, so nothing needs restarting."""
        return next_steps.waiting_in_place(self, run_id)

    def check_link(self, token: str) -> DecisionLink:
        """The decision a notice's signed link names (``LinkRefused`` if it is forged,
        damaged or expired), checked with this ledger's link secret: what the console
        does with a link before it shows its page. Whether the decision is still open
        is for the ledger's records to say."""
        from .controls._links import LinkSigner, link_secret  # only where links are used

        checker = self.notices.signer or LinkSigner(link_secret(self.url), "")
        return checker.check(token)

    def released_runs(self) -> list[RunRecord]:
        """Queued runs that a person's decision released and nothing has taken up since:
        they still need attention until one moves."""
        return self.store.released_runs(next_steps.LISTED)

    def journal(
        self, run_id: str | None = None, *, after: int = 0, limit: int = 1000
    ) -> list[JournalEntry]:
        """One page of the journal: at most ``limit`` records after id ``after``."""
        after, limit = numbers.count(after, "after"), numbers.count(limit, "limit")
        return self.store.journal(run_id, after, limit)

    def iter_journal(
        self, run_id: str | None = None, *, after: int = 0, page: int = pages.PAGE
    ) -> Iterator[JournalEntry]:
        """Every journal record after id ``after`` (of one run; ``""`` for those of no
        run, such as kill switches and agent budgets; all with None), in order, read
        ``page`` at a time as the iterator advances: nothing is left out however long."""
        after, page = numbers.count(after, "after"), numbers.count(page, "page", least=1)
        return pages.journal(self.store, run_id, after, page)

    def verify(
        self,
        *,
        public_keys: Iterable[str | Path] = (),
        against: Iterable[Checkpoint] | str | os.PathLike[str] = (),
        run_id: str | None = None,
    ) -> Report:
        """Check the journal's hash chains (of one run, or all), the signed checkpoints
        (with ``public_keys``, and those of an earlier export ``against``: its checkpoints,
        or the path of its ``export`` file), and that the tables hold what the journal
        says."""
        # Imported when asked: it brings the signing code.
        from .audit._verify import read_checkpoints, verify

        if isinstance(against, (str, os.PathLike)):
            against = read_checkpoints(against)
        return verify(self.store, public_keys=public_keys, against=against, run_id=run_id)

    def export(
        self, *, run_id: str | None = None, after_id: int = 0, checkpoints: bool = True
    ) -> Iterator[str]:
        """The journal as JSON lines (records after ``after_id``, then the checkpoints),
        for keeping it outside this machine and verifying it there."""
        from .audit._export import export_lines

        after_id = numbers.count(after_id, "after_id")
        return export_lines(self.store, run_id=run_id, after_id=after_id, checkpoints=checkpoints)

    def stamp_key(self) -> bytes:
        """The key that authenticates the stamps probes trust (``oncelog.markers``, the
        mail probe's Message-ID): derived for that purpose alone from the link secret
        (``$ONCELOG_LINK_SECRET``, else the ``link-secret`` file beside a SQLite ledger),
        which only the ledger's processes can read. Made once per ledger."""
        if self._stamp_key is None:
            import hashlib
            import hmac

            from .controls._links import link_secret  # only where stamps are used

            secret = link_secret(self.url)
            self._stamp_key = hmac.new(secret, b"oncelog-stamp", hashlib.sha256).digest()
        return self._stamp_key

    def redaction_key_for(self, tool_name: str) -> bytes:
        """The key that hashes secret fields; a tool with secrets needs one."""
        if self._redaction_key is None:
            raise ConfigurationError(
                f"tool {tool_name!r} declares secret fields, which are recorded as a keyed "
                "hash: give oncelog.open(redaction_key=...) or $ONCELOG_REDACTION_KEY (keep "
                "it stable: another key makes every recorded secret look changed)"
            )
        return self._redaction_key

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        """Sign the run's journal chain as it stands now (needs a signing key); None if
        nothing was added since the last checkpoint."""
        if self.signer is None:
            raise ConfigurationError(
                "no signing key: oncelog.open(signing_key=...) or $ONCELOG_SIGNING_KEY "
                "(make one with `oncelog keys new`)"
            )
        return self.store.checkpoint(run_id, self.signer.key_id, self.signer.sign)

    def prune(
        self,
        archive: str | os.PathLike[str],
        *,
        older_than: float | None = None,
        agents: Mapping[str, float] | None = None,
        limit: int = 10_000,
        batch: int = 100,
    ) -> PruneReport:
        """Retention: archive up to ``limit`` runs that ended more than ``older_than``
        seconds ago (or their agent's window in ``agents``; neither given, the retention
        policy's, ``set_retention``) and may go, to the new file
        ``archive``, then remove them ``batch`` at a time, each batch anchored in the
        journal (signed with the ledger's signing key). Given an archive of a prune that
        was stopped, remove what is left of it. ``docs/retention.md`` says what may go."""
        from .audit._prune import prune  # imported when asked

        return prune(self.store, archive, older_than=older_than, agents=agents or {},
                     limit=limit, batch=batch, signer=self.signer)  # fmt: skip

    def forget_pruned(self, run_id: str, *, by: str) -> RunPruned:
        """Let a pruned run's id start a new run again, whose effects run again: remove
        the tombstone that makes entering it raise ``RunPruned``, journalled with ``by``.
        Returns that refusal (its archive, when, how the run ended); ``UnknownRun`` if no
        prune removed a run of this id. ``docs/retention.md`` says when to."""
        if not by:
            raise ConfigurationError("forget_pruned(..., by=...) must name who decides")
        check_text(by, "by")
        check_name(run_id, "run_id")
        return self.store.forget_pruned(run_id, by=by)

    def set_retention(
        self, keep: float | timedelta | None, *, by: str, agent: str | None = None
    ) -> None:
        """The retention policy: keep runs ``keep`` seconds (or a ``timedelta``) after
        they end, for the ledger or, with ``agent``, that agent's runs (None removes the
        window). ``prune`` uses it when given no window. Journalled; ``verify`` holds the
        table to it."""
        if not by:
            raise ConfigurationError("set_retention(..., by=...) must name who decides")
        check_text(by, "by")
        if agent is not None:
            check_name(agent, "agent")
        window = None if keep is None else numbers.seconds(keep, "keep")
        self.store.set_retention(agent or "", window, by=by)

    def retention(self) -> dict[str, float]:
        """The retention policy: seconds by agent, ``""`` for the ledger's window."""
        return self.store.retention()

    def prunable(
        self,
        *,
        older_than: float | None = None,
        agents: Mapping[str, float] | None = None,
        limit: int = 10_000,
    ) -> list[str]:
        """The run ids ``prune`` with these windows would archive and remove now, the
        longest ended first (a read: nothing is written)."""
        from .audit._prune import checked_windows

        ledger_window, windows = checked_windows(self.store, older_than, agents or {})
        return self.store.prune_candidates(
            ledger_window, windows, numbers.count(limit, "limit", least=1)
        )

    def verify_archive(
        self, archive: str | os.PathLike[str], *, public_keys: Iterable[str | Path] = ()
    ) -> ArchiveReport:
        """Check a prune's archive: its chains, its checkpoints (signatures with
        ``public_keys``), and each run it holds against the anchor that removed it."""
        from .audit._prune_archive import verify_archive

        return verify_archive(archive, store=self.store, public_keys=public_keys)

    def size(self) -> LedgerSize:
        """Runs, steps and journal records held, the oldest run's creation, bytes on disk."""
        return self.store.ledger_size()

    def checkpoints(
        self, run_id: str | None = None, *, after_id: int = 0, limit: int = 1000
    ) -> list[Checkpoint]:
        after_id, limit = numbers.count(after_id, "after_id"), numbers.count(limit, "limit")
        return self.store.checkpoints(run_id, after_id, limit)

    def close(self) -> None:
        HEARTBEATS.release_store(self.store)
        with self._making_people:
            self.closed = True
            if self._people_made is not None:
                self._people_made[1].closed = True
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(
    url: str | None = None,
    *,
    durability: Literal["intent", "full", "process"] = "intent",
    lease_ttl: float = 30.0,
    max_payload_bytes: int = 1 << 20,
    approval_poll: float = 1.0,
    key_namespace: str | None = None,
    on_budget_alert: AlertCallback | None = None,
    signing_key: str | os.PathLike[str] | None = None,
    redaction_key: str | bytes | None = None,
    create: bool = True,
    on_alert: AnyAlertCallback | None = None,
    alert_webhook: str | None = None,
    store_timeout: float | None = None,
    notify_console_url: str | None = None,
    link_ttl: timedelta | float = 3600.0,
) -> Ledger:
    """Open the ledger at ``url``: a SQLite path or ``sqlite:///`` URL; by default
    ``$ONCELOG_URL``, else ``./.oncelog/ledger.db``. A new ledger is created there unless
    ``create=False``: then only an existing one is opened, nothing is created (no folder,
    file or table), and a place without a ledger raises ``LedgerNotFound``. A zero-byte
    file is ``LedgerNotFound`` either way (it may be a ledger truncated to nothing), and
    an existing SQLite file is checked (``PRAGMA quick_check``) before anything is
    written, unless it is unchanged since a store closed it whole: a damaged one raises
    ``CorruptRecord``.

    ``durability="intent"`` (one fsync per effect) keeps every intent through a power
    loss, and an outcome once the next intent or the run's end is committed; an outcome
    lost that way leaves its effect in doubt (docs/guarantees.md). ``"full"`` fsyncs
    every commit; ``"process"`` survives a process kill but not an OS crash.
    ``approval_poll`` is how often async code waiting for a person (an approval, a higher
    budget) looks again, in seconds.
    ``on_budget_alert`` is called with a ``BudgetAlert`` when a budget's warning threshold
    is crossed, or when its ``escalate`` limit is reached. ``on_alert`` is called with
    those and with a ``PersonNeeded`` once per halt or approval request of a run that
    needs a person; ``alert_webhook`` (default ``$ONCELOG_ALERT_WEBHOOK``), an http(s) URL,
    receives the ``PersonNeeded`` notices as JSON by POST. ``signing_key`` (default
    ``$ONCELOG_SIGNING_KEY``) is an Ed25519 private key file (``oncelog keys new``): with
    it, each run's journal chain is signed at the run's end. ``redaction_key`` (default
    ``$ONCELOG_REDACTION_KEY``) keys the hash that replaces tools' secret fields.
    ``key_namespace`` (default ``$ONCELOG_KEY_NAMESPACE``, else none) goes into every
    idempotency key: give each service its own if two could use the same run ids at one
    provider account. ``store_timeout`` bounds every call to the store, in seconds: past
    it the call raises ``StoreUnavailable`` (on PostgreSQL the default is the URL's
    ``oncelog_timeout``, else 10; on SQLite it is the busy timeout, 30 by default).
    ``notify_console_url`` (default ``$ONCELOG_CONSOLE_URL``) is the console's address as
    a person reaches it (``http://HOST:PORT``): with it, each notice carries one signed
    link per decision, valid for ``link_ttl`` (default one hour), signed with
    ``$ONCELOG_LINK_SECRET`` or the ``link-secret`` file next to a SQLite ledger
    (docs/operations.md)."""
    if key_namespace is None:
        key_namespace = os.environ.get("ONCELOG_KEY_NAMESPACE", "")
    key = signing_key or os.environ.get("ONCELOG_SIGNING_KEY") or None
    secret = redaction_key or os.environ.get("ONCELOG_REDACTION_KEY") or None
    url = url or os.environ.get("ONCELOG_URL") or None
    webhook = _alert_webhook(alert_webhook)
    links = _link_signer(notify_console_url, link_ttl, url or DEFAULT_PATH)
    signer = None
    if key is not None:  # only then: most agents do not sign, and need not load the code
        from .audit._signing import Signer

        signer = Signer(key)
    return Ledger(
        open_store(url, durability=durability, create=create, timeout=store_timeout),
        lease_ttl=lease_ttl,
        max_payload_bytes=max_payload_bytes,
        approval_poll=approval_poll,
        key_namespace=key_namespace,
        on_budget_alert=on_budget_alert,
        signer=signer,
        redaction_key=secret.encode() if isinstance(secret, str) else secret,
        on_alert=on_alert,
        alert_webhook=webhook,
        url=url or DEFAULT_PATH,
        link_signer=links,
    )


def _link_signer(given: str | None, ttl: timedelta | float, ledger_url: str) -> LinkSigner | None:
    """What signs the notices' decision links, if the console's address is known."""
    console = given or os.environ.get("ONCELOG_CONSOLE_URL") or None
    if console is None:
        return None
    from ._webhook import checked_url
    from .controls._links import LinkSigner, link_secret  # only where links are used

    setting = "notify_console_url" if given else "$ONCELOG_CONSOLE_URL"
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
    numbers.seconds(seconds, "link_ttl")
    if seconds <= 0:
        raise ConfigurationError("link_ttl must be more than 0 seconds")
    return LinkSigner(link_secret(ledger_url), checked_url(console, setting), seconds)


def _alert_webhook(given: str | None) -> str | None:
    """The person-needed webhook, ``given`` or from the environment, checked before any
    ledger is opened: the setting it came from is named, the URL (and its token) not."""
    setting = "alert_webhook" if given else "$ONCELOG_ALERT_WEBHOOK"
    url = given or os.environ.get("ONCELOG_ALERT_WEBHOOK") or None
    if url is None:
        return None
    from ._webhook import checked_url  # here: most ledgers have no webhook

    return checked_url(url, setting)
