"""A run in progress: the object an agent's code records its steps through.

``with ledger.run(...) as run`` gives a ``Run``; ``async with`` gives an ``AsyncRun``.
Both hand out positions in call order and share the effect state machine; the async one
does its store writes in a worker thread so the event loop never waits on an fsync.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol, TypeVar, cast

from .._commands import option
from .._exceptions import (
    EffectRefused,
    LeaseLost,
    NeedsPerson,
    NotATool,
    OnceLogError,
    ReplayDivergence,
    RunHalted,
    RunStopped,
    StoreUnavailable,
    TryLater,
    UnserializableValue,
    UsageError,
    WaitingForPerson,
)
from .._log import log
from ..process import _leases as leases
from ..process import _main as main
from ..process._heartbeat import HEARTBEATS
from ..records._budgets import remaining
from ..records._records import RunRecord, RunStatus, StepType
from ..records._redact import redact_call
from ..records._serialization import MAX_DEPTH
from ..signals import _crashpoints as crashpoints
from ._approval_policy import edited_arguments
from ._calls import Again, Call, Pending, Replayed, encode_args
from ._effects import Engine
from ._holds import Hold, innermost_token, resource_name
from ._names import MAX_NAME_CHARS, check_name
from ._replay import MISS
from ._run_options import RunOptions
from ._tools import ACTIVE_RUN, Caller, DriftPolicy, Tool, step_spec

# Module constants: on Python 3.11 reading an enum member off its class costs about 1,000
# instructions (a global: about 60), and replay reads one or two per step.
_EFFECT, _READ, _LLM = StepType.EFFECT, StepType.READ, StepType.LLM
_COMPLETED, _FAILED = RunStatus.COMPLETED, RunStatus.FAILED  # read at every run's end

if TYPE_CHECKING:
    from ..audit._signing import Signer
    from ..controls._notices import Notices
    from ..controls._waiting import Waiter
    from ..records._budgets import Budget, Usage
    from ..stores._protocol import Lease


class Host(Protocol):
    """What a run uses of its ``Ledger``, which imports this module to make runs."""

    @property
    def approval_poll(self) -> float: ...
    @property
    def notices(self) -> Notices: ...
    @property
    def waiter(self) -> Waiter: ...
    @property
    def max_payload_bytes(self) -> int: ...
    @property
    def signer(self) -> Signer | None: ...
    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]: ...
    def halt(self, reason: str, *, by: str, run: str | None = None) -> object: ...
    def declare_result(self, tool: str, schema: dict[str, Any] | None = None) -> None: ...
    def redaction_key_for(self, tool_name: str) -> bytes: ...
    def stamp_key(self) -> bytes: ...
    def checkpoint(self, run_id: str) -> object: ...
    def start_run(self, run_id: str, options: RunOptions) -> tuple[Engine, RunRecord]: ...


R = TypeVar("R")
PersonStop = TypeVar("PersonStop", bound="NeedsPerson | WaitingForPerson")

_current = ACTIVE_RUN  # only a Run or an AsyncRun is ever set in it


def current_run() -> Run | AsyncRun | None:
    """The run whose ``with`` block is executing, if any."""
    return cast("Run | AsyncRun | None", _current.get())


# asyncio is imported by the async paths only: an async agent has loaded it already, and a
# synchronous one should not pay for it (a tenth of the package's import time).
async def _in_thread(fn: Callable[..., R], /, *args: Any) -> R:
    import asyncio

    return await asyncio.to_thread(fn, *args)


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


async def _replayed(value: R) -> R:
    """A step replayed on the event loop: no store call, no worker thread."""
    return value


class _Steps:
    """What ``Run`` and ``AsyncRun`` share: the engine and how calls become ``Call``s."""

    # Whether the run can await a coroutine-function tool (only ``AsyncRun`` can).
    _awaits_tools: ClassVar[bool] = False

    def __init__(self, ledger: Host, engine: Engine, record: RunRecord) -> None:
        self._ledger = ledger
        self._engine = engine
        self.record = record
        self._held: dict[str, list[int]] = {}  # resources this run holds: [token, depth]
        # The stops for a person this run raised to its code and announced, as (error
        # name, step id): a later step the stop refuses is announced already.
        self._told: set[tuple[str, str | None]] = set()
        # An approval or a budget pause the code was told of, still undecided here: the
        # run ends waiting on it whatever the code did with it (``_close``).
        self._waiting: WaitingForPerson | None = None

    @property
    def run_id(self) -> str:
        return self._engine.run_id

    @property
    def plan(self) -> tuple[str, ...] | None:
        """The stored plan: take step names from here, not from a model after a restart."""
        return self._engine.plan

    @property
    def fencing_token(self) -> int:
        return self._engine.lease.token

    def hold(self, name: Any, *, wait: float = 0.0) -> Hold:
        """A hold on the resource ``name`` (a string or a tuple of JSON scalars, such as
        ``("host", "db-1")``), for ``with`` (``async with`` in an ``AsyncRun``): one run
        at a time holds it, whichever process or agent asks; entering waits up to ``wait``
        seconds, then raises ``ResourceHeld`` (exit 75), or ``HoldInDoubt`` (exit 3) where
        the holder's process is gone and an effect it began under the hold is in doubt.
        Tools that declare ``hold_token`` are handed its token, greater for every new
        holder."""
        resource = resource_name(name, self.run_id)
        engine = self._engine
        return Hold(engine.store, engine.lease, self._held, resource, float(wait))

    def budget_left(self) -> dict[str, Any]:
        """What is left of each limit of the run's budget (None: unlimited; {} without a
        budget), read from the ledger: put it in a prompt."""
        budget, used = self._ledger.budget_usage(self.run_id)
        return {} if budget is None else remaining(budget, used)

    def halt(self, reason: str, *, by: str) -> NoReturn:
        """Turn this run's kill switch on and stop here: for code that detects trouble
        (a lockout, a runaway loop). A restart does not clear it; a person must."""
        self._ledger.halt(reason, by=by, run=self.run_id)
        raise self._announced(
            RunHalted(
                f"halted by {by}: {reason}; a person clears it with: "
                f"oncelog resume {option('--run', self.run_id)} --by NAME",
                run_id=self.run_id,
            )
        )

    def _announced(self, stop: PersonStop) -> PersonStop:
        """``stop``, a stop for a person that the engine has just recorded (the run's row,
        the unknown step, the kill switch, the approval request), announced before the
        code sees it: whatever the code does with it (catches it, calls ``sys.exit(0)``,
        is killed), the person has been told, once (``Notices`` dedupes by the notice's
        id, so a restart that meets the same stop pages nobody again; a kill before this
        leaves the notice to the restart that meets the stop)."""
        if crashpoints.ARMED:
            crashpoints.reach("after_stop_commit", stop.step_id or "")
        stop.wait_for_decision = functools.partial(self._ledger.waiter.after_stop, self.run_id)
        if isinstance(stop, WaitingForPerson):
            self._waiting = stop
        told = (type(stop).__name__, stop.step_id)
        if told not in self._told:
            self._told.add(told)
            self._ledger.notices.stopped(stop, self.run_id, self._engine.lease.agent)
        return stop

    def _take(
        self,
        step_id: str | None,
        type_: StepType,
        tool: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        name: str | None,
        input_digest: str | None,
        drift: DriftPolicy = "warn",
    ) -> tuple[int, Any]:
        """The checks of a call, made before it takes a position; then its position, and
        the result recorded there if a done step replays from the page read last, else
        the ``Call`` that ``Engine.prepare`` decides. ``tool`` is an effect's ``Tool``, or
        the function of a model call or a query (whose ``name`` and ``input_digest`` it is
        recorded under). The methods that take steps call it themselves, and a step that
        replays makes no other call of ``Run``'s: replay makes one per step."""
        if step_id is not None and not (
            # check_name's verdict on the common id, without its calls (once per step)
            type(step_id) is str and 0 < len(step_id) <= MAX_NAME_CHARS
            and step_id.isascii() and "\x00" not in step_id
        ):  # fmt: skip
            # Before anything: an empty or unstorable id would be refused only by a store.
            check_name(step_id, "step_id", run_id=self.run_id)
        if type_ is _EFFECT:
            if not isinstance(tool, Tool):
                raise NotATool(
                    f"{tool!r} is not an oncelog tool; declare it with @ledger.tool(kind=...)",
                    run_id=self.run_id,
                    step_id=step_id,
                )
            if tool.is_async and not self._awaits_tools:
                raise UsageError(
                    f"tool {tool.spec.name!r} is a coroutine function; run it inside "
                    "`async with ledger.run(...)` and `await run.effect(...)`",
                    run_id=self.run_id,
                    step_id=step_id,
                )
            spec = tool.spec
            fn: Callable[..., Any] = tool.fn
            if spec.takes_hold_token:
                innermost_token(self.run_id, spec.name)  # refused before it takes a position
            if spec.result_schema is not None:
                self._ledger.declare_result(spec.name, spec.result_schema)
            if spec.evidence_url is not None:  # for the notice, should this effect stop
                self._ledger.notices.evidence[spec.name] = spec.evidence_url
            payload: dict[str, Any] = {"args": list(args), "kwargs": kwargs}
        else:
            spec, fn = step_spec(tool, name, drift), tool
            payload = {"args": list(args), "kwargs": kwargs}
            if input_digest is not None:
                payload["input_digest"] = input_digest
        secret_key = None
        if spec.secret:
            secret_key = self._ledger.redaction_key_for(spec.name)
            try:
                payload = redact_call(payload, spec.secret_positions, spec.secret, secret_key)
            except RecursionError:
                raise UnserializableValue(
                    f"arguments are nested more than {MAX_DEPTH} levels deep",
                    run_id=self.run_id, step_id=step_id,
                ) from None  # fmt: skip
        args_json = None
        engine = self._engine  # its limit is the ledger's; no property calls per step
        cursor = engine.cursor
        if cursor.next >= cursor.frontier:
            # Refused before it takes a position; replay compares decoded arguments.
            args_json = encode_args(payload, engine.payload_limit, engine.lease.run_id, step_id)
        seq = cursor.position()
        cursor.next = seq + 1
        if seq < cursor.frontier:
            value = engine.replay_done(seq, step_id, type_, spec.name, payload, spec.idempotent)
            if value is not MISS:
                return seq, value
        elif args_json is None:  # a concurrent step's position was taken in between
            args_json = encode_args(payload, engine.payload_limit, engine.lease.run_id, step_id)
        return seq, Call(step_id, type_, spec, payload, args_json, fn, secret_key)

    def _kwargs_for(self, pending: Pending, kwargs: dict[str, Any]) -> dict[str, Any]:
        """What oncelog adds to an effect's arguments: its idempotency key, and the run's
        fencing token for a tool that takes one (a provider that keeps the highest token
        it saw per run can refuse a worker that lost its lease), and the innermost
        hold's token for a tool that declares ``hold_token``. A model call's or a
        query's are its own: they are passed as they came, without this call."""
        spec = pending.call.spec
        if spec.takes_token:
            kwargs = {**kwargs, "fencing_token": self._engine.lease.token}
        if spec.takes_hold_token:
            kwargs = {**kwargs, "hold_token": innermost_token(self.run_id, spec.name)}
        if spec.takes_key:
            return {**kwargs, "idempotency_key": pending.step.key}
        return kwargs

    def _live(self, seq: int, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A step that ``_take`` did not replay: decided, run, recorded."""
        fn, effect = call.fn, call.step_type is _EFFECT
        while True:  # a failed attempt the retry policy makes again comes back here
            try:
                got = self._engine.prepare(seq, call)
            except (NeedsPerson, WaitingForPerson) as stop:
                self._announced(stop)
                raise
            if self._waiting is not None:
                self._let_through(seq, call)
            if isinstance(got, Replayed):
                return got.value
            if effect and got.call.edit is not None:  # a person approved other arguments
                args, kwargs = (), _edited(got.call, args, kwargs)
            try:
                tool_kwargs = self._kwargs_for(got, kwargs) if effect else kwargs
                result = fn(*args, **tool_kwargs)
            except Exception as exc:
                if not effect:  # a model call or a read that raised records nothing
                    self._engine.cursor.give_back(seq)
                err = self._failed(got, exc)
                if err is None:
                    continue
                raise err from exc
            return self._engine.outcomes.complete(got, result)

    def tool_called(
        self, tool: Tool[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """What calling ``tool(...)`` inside this run does: an effect at the next position,
        run and recorded at once. (An ``AsyncRun`` hands back an awaitable for a coroutine
        function, which the caller awaits as it would await the tool's own.)"""
        seq, got = self._take(None, _EFFECT, tool, args, kwargs, None, None)
        return got if type(got) is not Call else self._live(seq, got, args, kwargs)

    def _let_through(self, seq: int, call: Call) -> None:
        """The step the run waited on got past its approval or budget in this process."""
        waiting = self._waiting
        step_id = call.step_id if call.step_id is not None else f"{call.spec.name}@{seq}"
        if waiting is not None and waiting.step_id == step_id:
            self._waiting = None

    def _failed(self, pending: Pending, exc: Exception) -> Exception | None:
        """The exception to raise, or None to make the attempt again."""
        err = self._engine.fail(pending, exc)
        if isinstance(err, Again):
            return None
        if err is exc:
            # Re-raising the tool's own exception: keep its traceback, add no cause.
            raise exc
        if isinstance(err, NeedsPerson):  # the call left its effect in doubt
            self._announced(err)
        return err

    def _close(self, exc: BaseException | None) -> None:
        """Record how the run ended and release its lease."""
        engine = self._engine
        escapes = None  # raised here though the block's code raised nothing
        stop = engine.stop
        if not isinstance(exc, RunStopped) and (stop is not None or self._waiting is not None):
            # The code caught the run's stop and went on, or ended its process with it
            # (``sys.exit(0)``) or was interrupted: the run ends where it stopped, and a
            # block that then ended without an error raises the stop, so the exit code
            # and the alert are the stop's. (An approval or a budget pause does not stop
            # later steps, but the run cannot end before a person decides it either.)
            caught = stop.error(self.run_id) if stop is not None else self._waiting
            escapes = caught if exc is None else None
            exc = caught
        if exc is None:
            try:
                engine.cursor.check_fully_replayed()
            except ReplayDivergence as found:
                exc = escapes = found
        status, reason = _ending(exc)
        if status is _FAILED and self._refused_before_any_step(exc):
            status, reason = RunStatus.RUNNING, f"refused: {type(exc).__name__}: {exc}"
        HEARTBEATS.release(engine.lease)
        try:
            if not isinstance(exc, LeaseLost):
                stopped_by = None if exc is None else type(exc).__name__
                engine.store.finish(engine.lease, status, reason, stopped_by)
        except RunStopped:
            pass  # another worker owns the run now; there is nothing of ours to release
        except OnceLogError:
            if exc is None:
                raise
            # The store failing must not hide why the run stopped; the lease expires.
        finally:
            leases.forget(engine.lease.owner)
        person: NeedsPerson | WaitingForPerson | EffectRefused | None = None  # ended on
        if isinstance(exc, (NeedsPerson, WaitingForPerson)):
            # Whoever catches the stop (``run_main``) may wait for the decision with it;
            # a stop met at a step was announced then, and one found here (a divergence
            # at the end) now.
            person = self._announced(exc)
        elif isinstance(exc, EffectRefused) and status is _FAILED:
            # Ended on an effect that did not happen: only a person's retry or redrive moves
            # it, and a process waiting in place goes on after one.
            exc.wait_for_decision = functools.partial(self._ledger.waiter.after_stop, self.run_id)
            self._ledger.notices.stopped(exc, self.run_id, engine.lease.agent)
            person = exc
        if main.RUNNING[0]:
            # ``run_main`` ends with a stop the code swallowed as with one it raised.
            main.ended(self.run_id, person)
        self._sign_chain()
        if escapes is not None:
            raise escapes

    def _refused_before_any_step(self, exc: BaseException | None) -> bool:
        """Code oncelog refused (an integration driven the wrong way, a tool nobody
        guards) in a run with nothing recorded: nothing of the run happened, so it is not
        failed. A worker's run still is, or another worker would take it again at once."""
        return (
            isinstance(exc, UsageError)
            and self._engine.cursor.frontier == 0
            and self.record.input_json is None
        )

    def _sign_chain(self) -> None:
        """A signed checkpoint at the run's end. Not having one is not worth failing the
        run for: the chain itself is written; the next end or ``ledger.checkpoint`` signs
        it."""
        if self._ledger.signer is None:
            return
        try:
            self._ledger.checkpoint(self.run_id)
        except OnceLogError as exc:
            log.warning("no checkpoint for run %s: %s", self.run_id, exc)


def abandon(run: Run | AsyncRun) -> None:
    """Forget ``run`` as a crash would: no outcome, no release (``oncelog.testing``)."""
    leases.forget(run._engine.lease.owner)
    if current_run() is run:
        _current.set(None)


def _ending(exc: BaseException | None) -> tuple[RunStatus, str | None]:
    if exc is None:
        return _COMPLETED, None
    if isinstance(exc, NeedsPerson):
        return RunStatus.HALTED, str(exc)
    if isinstance(exc, WaitingForPerson):
        return RunStatus.WAITING, str(exc)
    if isinstance(exc, (TryLater, StoreUnavailable)):
        # Nothing is wrong with the run: this process is draining, or the ledger was out
        # of reach for a moment. Failing it would lose it; queued, a worker takes it again.
        return RunStatus.QUEUED, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Exception):
        return RunStatus.FAILED, f"{type(exc).__name__}: {exc}"
    # KeyboardInterrupt, SystemExit, cancellation: the run can be resumed at once.
    return RunStatus.RUNNING, f"interrupted by {type(exc).__name__}"


class Run(_Steps):
    """A run driven by synchronous code."""

    def skip_settled(self, before: int | None = None) -> int:
        """Enter the run at its first step that is not a settled effect instead of at
        its top, and return that position: for a caller whose steps are each named and
        asked for on their own (``oncelog gateway``), never for an agent's code, whose
        replay must ask for every step in order. The effects recorded ``done``,
        ``failed`` or ``abandoned`` at the positions below ``before`` (by default, all
        recorded) are passed over, as replaying them would only hand back what is
        recorded; the first other step (in doubt, not done, a read, a model call) and a
        stop the run is held at are not: the caller asks for the recorded steps from the
        returned position on, in order, before its own. Only before the run's first
        step."""
        engine = self._engine
        cursor = engine.cursor
        if cursor.next:
            raise UsageError("skip_settled comes before the run's first step", run_id=self.run_id)
        upto = cursor.frontier if before is None else max(0, min(before, cursor.frontier))
        if engine.stop is not None:
            upto = min(upto, engine.stop.seq)
        first = engine.run_store.first_unsettled(self.run_id, upto) if upto else 0
        cursor.start_at(first)
        return first

    def effect(self, step_id: str | None, tool: Tool[..., R], /, *args: Any, **kwargs: Any) -> R:
        """Run ``tool`` once for this step; on replay return its recorded result.

        ``step_id`` is a stable name (ideally from the stored plan) or None for the
        position of the call in the run. The tool receives ``idempotency_key``."""
        seq, got = self._take(step_id, _EFFECT, tool, args, kwargs, None, None)
        result: R = got if type(got) is not Call else self._live(seq, got, args, kwargs)
        return result

    def read(
        self, step_id: str | None, fn: Callable[..., R], /, *args: Any,
        name: str | None = None, input_digest: str | None = None, **kwargs: Any,
    ) -> R:  # fmt: skip
        """A query: recorded so that replay sees what the first run saw. ``name`` (by
        default ``fn``'s qualified name) is the step's tool name, checked on replay;
        ``input_digest``, a hash of an input not passed as an argument, is recorded with
        the arguments, so that replay warns when it differs."""
        seq, got = self._take(step_id, _READ, fn, args, kwargs, name, input_digest)
        result: R = got if type(got) is not Call else self._live(seq, got, args, kwargs)
        return result

    def llm(
        self, step_id: str | None, fn: Callable[..., R], /, *args: Any,
        name: str | None = None, input_digest: str | None = None,
        drift: DriftPolicy = "warn", **kwargs: Any,
    ) -> R:  # fmt: skip
        """A model call: its response and token usage are recorded; replay costs no tokens.
        ``name`` and ``input_digest`` as for ``read``. Asked again at a recorded position
        with other input, it returns the recorded answer with a warning (``drift="warn"``)
        or stops the run with ``ArgumentDrift`` (``"error"``)."""
        seq, got = self._take(step_id, _LLM, fn, args, kwargs, name, input_digest, drift)
        result: R = got if type(got) is not Call else self._live(seq, got, args, kwargs)
        return result


class AsyncRun(_Steps):
    """A run driven by asyncio code. Tools may be coroutine functions or plain ones.

    Each method takes its position when called, not when awaited, so steps started
    together (``asyncio.gather``) keep the order in which the code asked for them."""

    _awaits_tools = True

    def tool_called(
        self, tool: Tool[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if tool.is_async:
            seq, got = self._take(None, _EFFECT, tool, args, kwargs, None, None)
            return (
                _replayed(got) if type(got) is not Call else self._run_step(seq, got, args, kwargs)
            )
        return super().tool_called(tool, args, kwargs)

    async def _run_step(
        self, seq: int, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """A step that ``_take`` did not replay: decided and recorded in a worker thread,
        run on the event loop."""
        fn, effect = call.fn, call.step_type is _EFFECT
        while True:  # a failed attempt the retry policy makes again comes back here
            got = await self._prepared(seq, call)
            if isinstance(got, Replayed):
                return got.value
            if effect and got.call.edit is not None:  # a person approved other arguments
                args, kwargs = (), _edited(got.call, args, kwargs)
            try:
                tool_kwargs = self._kwargs_for(got, kwargs) if effect else kwargs
                result = fn(*args, **tool_kwargs)
                if isinstance(result, Awaitable):
                    result = await result
            except Exception as exc:
                if not effect:  # on the event loop, where positions are taken
                    self._engine.cursor.give_back(seq)
                err = await _in_thread(self._failed, got, exc)
                if err is None:
                    continue
                raise err from exc
            return await _in_thread(self._engine.outcomes.complete, got, result)

    async def _prepared(self, seq: int, call: Call) -> Replayed | Pending:
        told = False
        while True:  # async code awaits a person (an approval, a higher budget), not exit 4
            try:
                return await _in_thread(self._engine.prepare, seq, call)
            except NeedsPerson as stop:
                await _in_thread(self._announced, stop)
                raise
            except WaitingForPerson as waits:
                if not told:
                    told = True
                    notices, agent = self._ledger.notices, self._engine.lease.agent
                    await _in_thread(notices.stopped, waits, self.run_id, agent)
                await _sleep(self._ledger.approval_poll)

    def effect(
        self, step_id: str | None, tool: Tool[..., Any], /, *args: Any, **kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        """Await to run ``tool`` once for this step; see ``Run.effect``."""
        seq, got = self._take(step_id, _EFFECT, tool, args, kwargs, None, None)
        return _replayed(got) if type(got) is not Call else self._run_step(seq, got, args, kwargs)

    def read(
        self, step_id: str | None, fn: Callable[..., Any], /, *args: Any,
        name: str | None = None, input_digest: str | None = None, **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:  # fmt: skip
        """Await a recorded query; see ``Run.read``."""
        seq, got = self._take(step_id, _READ, fn, args, kwargs, name, input_digest)
        return _replayed(got) if type(got) is not Call else self._run_step(seq, got, args, kwargs)

    def llm(
        self, step_id: str | None, fn: Callable[..., Any], /, *args: Any,
        name: str | None = None, input_digest: str | None = None,
        drift: DriftPolicy = "warn", **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:  # fmt: skip
        """Await a recorded model call; see ``Run.llm``."""
        seq, got = self._take(step_id, _LLM, fn, args, kwargs, name, input_digest, drift)
        return _replayed(got) if type(got) is not Call else self._run_step(seq, got, args, kwargs)


class RunContext:
    """What ``ledger.run(...)`` returns: enter it with ``with`` or ``async with``."""

    def __init__(self, ledger: Host, run_id: str, options: RunOptions) -> None:
        self._ledger = ledger
        self._run_id = run_id
        self._options = options
        self._run: Run | AsyncRun | None = None
        self._token: contextvars.Token[Caller | None] | None = None

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def claimed_record(self) -> RunRecord:
        """The run as it was when a worker claimed it (only for claimed runs)."""
        return self._claimed()[1]

    @property
    def claimed_lease(self) -> Lease:
        """The lease a worker's claim holds (only for claimed runs)."""
        return self._claimed()[0]

    def _claimed(self) -> tuple[Lease, RunRecord]:
        claimed = self._options.claimed
        if claimed is None:
            raise UsageError("this run was not claimed by a worker", run_id=self._run_id)
        return claimed

    def __enter__(self) -> Run:
        engine, record = self._ledger.start_run(self._run_id, self._options)
        run = Run(self._ledger, engine, record)
        self._run, self._token = run, _current.set(run)
        return run

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit(exc)

    async def __aenter__(self) -> AsyncRun:
        start = self._ledger.start_run
        engine, record = await _in_thread(lambda: start(self._run_id, self._options))
        run = AsyncRun(self._ledger, engine, record)
        self._run, self._token = run, _current.set(run)
        return run

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        run, self._run = self._run, None
        if self._token is not None:
            _current.reset(self._token)
        if run is not None:
            await _in_thread(run._close, exc)

    def _exit(self, exc: BaseException | None) -> None:
        run, self._run = self._run, None
        if self._token is not None:
            _current.reset(self._token)
        if run is not None:
            run._close(exc)


def _edited(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of the call a person's edit stands for."""
    assert call.edit is not None
    return edited_arguments(call.fn, args, kwargs, call.edit, call.spec.secret)


def active_stamp_key() -> bytes | None:
    """The stamp key (``Host.stamp_key``) of the ledger whose run is executing in this
    context; None outside a run."""
    run = _current.get()
    if isinstance(run, (Run, AsyncRun)):
        return run._ledger.stamp_key()
    return None
