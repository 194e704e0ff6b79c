"""Tools: callables with consequences, declared once with their kind and policies."""

from __future__ import annotations

import contextvars
import enum
import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar

from .. import _numbers as numbers
from .._exceptions import ConfigurationError, NoActiveRun
from ..failures import Classifier
from ..records._argument_edits import edit_shape
from ..records._evidence_url import checked_evidence_url
from ..records._redact import secret_positions
from ._names import check_name
from ._probes import Preflight, Probe
from ._providers import Provider, with_provider
from ._retry import Retry

# How long a person's approval holds after the decision when the tool names no bound: an
# approval given for a call today must not let the same call through next week.
APPROVAL_LIFE = 24 * 3600.0

P = ParamSpec("P")
R = TypeVar("R")


class Kind(str, enum.Enum):
    """What a repeated call would do to the world; it sets the default controls."""

    READ = "read"
    UPSERT = "upsert"
    CREATE = "create"
    PAYMENT = "payment"
    DESTRUCTIVE = "destructive"

    @property
    def idempotent(self) -> bool:
        """Safe to run again when a previous attempt's outcome is unknown."""
        return self in (Kind.READ, Kind.UPSERT)


DriftPolicy = Literal["error", "warn"]
RepeatPolicy = Literal["replay", "error"]
KindName = Literal["read", "upsert", "create", "payment", "destructive"]


def default_drift(kind: Kind) -> DriftPolicy:
    return "warn" if kind.idempotent else "error"


@dataclass(frozen=True)
class ToolSpec:
    """How oncelog treats one tool."""

    name: str
    kind: Kind
    refusals: tuple[type[BaseException], ...]
    drift: DriftPolicy
    takes_key: bool
    idempotent: bool = False
    probe: Probe | None = None
    dedupe_window: float | None = None  # seconds the provider deduplicates on the key
    preflight: Preflight | None = None  # asked before each attempt
    failures: Classifier | None = None  # what an exception of the call means
    retry: Retry | None = None  # attempts and waits for what was not performed
    # Each attempt needs a person's approval of its arguments: always, or when a function
    # of them says so (``runtime/_approval_policy``).
    approval: bool | Callable[..., Any] = False
    cost: float | Callable[..., float] = 0.0  # charged to the run's budget per attempt
    irreversible: bool = False  # counted against the budget's irreversible actions
    secret: frozenset[str] = frozenset()  # fields recorded only as a keyed hash
    secret_positions: tuple[int, ...] = ()  # positional arguments among them
    takes_token: bool = False  # the tool is handed the run's fencing token
    takes_hold_token: bool = False  # ... and the innermost hold's (runtime/_holds.py)
    result_schema: dict[str, Any] | None = None  # what a person's result must match
    once_per: Callable[..., Any] | None = None  # the subject, from the call's arguments
    once_for: float | None = None  # seconds a done subject stays claimed (None: forever)
    repeat_error: bool = False  # a subject done by another step raises ``SubjectDone``
    evidence_url: str | None = None  # where an effect is looked up at the provider
    approval_expires: float | None = None  # seconds an approval holds after its decision
    # The parameters a person may approve other values of (``_approval_edits``): JSON, or
    # None for a tool whose signature cannot be filled by name (``*args``, ``**kwargs``).
    edit_shape: str | None = None


class Caller(Protocol):
    """What a tool called inside ``ledger.run`` is handed to: the run (``Run``, ``AsyncRun``)."""

    def tool_called(
        self, tool: Tool[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any: ...


# The run whose ``with`` block is executing in this context (``_run`` sets it): held here,
# with the tools that read it, so that tools need not know what a run is.
ACTIVE_RUN: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "oncelog_run", default=None
)


class Tool(Generic[P, R]):
    """A decorated callable. Inside ``ledger.run`` a direct call is a recorded effect
    whose step id is its position in the run; outside one it refuses to run."""

    # What every step reads (``fn``, ``spec``, ``is_async``) lives in slots, read without
    # a dictionary. The wrapped function's metadata (``update_wrapper``'s copy, for
    # ``help()`` and ``inspect.signature``) goes in the instance's dictionary, which no
    # step reads: without slots, that copy materialised the dictionary, and Python 3.11
    # then read every attribute through it, more slowly than from inline values.
    __slots__ = ("__dict__", "__weakref__", "fn", "is_async", "spec")

    def __init__(self, fn: Callable[..., R], spec: ToolSpec) -> None:
        self.fn = fn
        self.spec = spec
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        # Not P: the caller leaves out ``idempotency_key``, which oncelog supplies.
        run = ACTIVE_RUN.get()
        if run is None:
            raise NoActiveRun(
                f"tool {self.spec.name!r} was called outside ledger.run(...); "
                "call tool.fn(...) to run it unguarded on purpose"
            )
        result: R = run.tool_called(self, args, kwargs)
        return result

    def __repr__(self) -> str:
        return f"<oncelog.Tool {self.spec.name} kind={self.spec.kind.value}>"


def _for_function(spec: ToolSpec, fn: Callable[..., Any]) -> ToolSpec:
    """``tool``'s policies completed with what ``fn``'s signature says: its name by
    default, and which of the key and the tokens it is handed."""
    params = inspect.signature(fn).parameters
    takes_key = "idempotency_key" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )
    if spec.dedupe_window is not None and not takes_key:
        raise ConfigurationError(
            f"{spec.name or fn.__qualname__!r} declares a dedupe_window but takes no "
            "idempotency_key: a resend would reach the provider with no key to deduplicate"
        )
    return replace(
        spec,
        name=spec.name or fn.__qualname__,
        takes_key=takes_key,
        takes_token="fencing_token" in params,
        takes_hold_token="hold_token" in params,
        secret_positions=secret_positions(fn, spec.secret),
        edit_shape=None if spec.approval is False else edit_shape(fn, spec.secret),
    )


def _subject_policy(
    once_per: Callable[..., Any] | None,
    once_for: timedelta | float | None,
    repeat: str,
    dedupe_window: timedelta | float | None,
) -> float | None:
    """``once_for`` in seconds, once the subject's keywords are checked."""
    if repeat not in ("replay", "error"):
        raise ConfigurationError(f"repeat must be 'replay' or 'error', not {repeat!r}")
    if once_per is None:
        if once_for is not None or repeat != "replay":
            raise ConfigurationError("once_for and repeat need once_per, the effect's subject")
        return None
    if not callable(once_per):
        raise ConfigurationError(
            f"once_per must be a function of the tool's arguments, not {once_per!r}"
        )
    if once_for is None:
        return None
    seconds = once_for.total_seconds() if isinstance(once_for, timedelta) else float(once_for)
    if not seconds > 0:
        raise ConfigurationError(f"once_for must be positive, not {once_for!r}")
    window = _seconds(dedupe_window)
    if window is not None and window >= seconds:
        # Set when every claim of a subject shared one key, which the window would have
        # answered with the last claim's result. Claims have keys of their own now; the
        # limit stays (tests/test_subjects.py) until lifting it is decided on purpose.
        raise ConfigurationError(
            f"once_for ({seconds:g} s) must be longer than the dedupe_window ({window:g} s)"
        )
    return seconds


def _approval(kind: Kind, approval: bool | Callable[..., Any] | None) -> bool | Callable[..., Any]:
    """Whether each attempt needs a person: by default for destructive tools."""
    if approval is None:
        return kind is Kind.DESTRUCTIVE
    if not isinstance(approval, bool) and not callable(approval):
        raise ConfigurationError(
            f"approval must be a bool or a function of the tool's arguments, not {approval!r}"
        )
    return approval


def _seconds(ttl: timedelta | float | None) -> float | None:
    return None if ttl is None else numbers.seconds(ttl, "dedupe_window")


def step_spec(fn: Any, name: str | None = None, drift: DriftPolicy = "warn") -> ToolSpec:
    """How a model call or a query is treated: recorded, and run again when in doubt.
    Its name (checked on replay) is ``name``, else the function's qualified name; asked
    again with other input, it warns (``drift="warn"``) or stops the run (``"error"``)."""
    return _named_spec(str(name or getattr(fn, "__qualname__", type(fn).__qualname__)), drift)


# A spec depends on the name alone, and building one (a frozen dataclass of 18 fields)
# costs more than the rest of checking a model call: one per name, for the names in use.
@functools.lru_cache(maxsize=1024)
def _named_spec(name: str, drift: DriftPolicy) -> ToolSpec:
    return ToolSpec(name, Kind.READ, (), drift, takes_key=False, idempotent=True)


def tool(
    *,
    kind: Kind | KindName,
    name: str | None = None,
    refusals: tuple[type[BaseException], ...] = (),
    drift: DriftPolicy | None = None,
    probe: Probe | None = None,
    dedupe_window: timedelta | float | None = None,
    key_ttl: timedelta | float | None = None,
    preflight: Preflight | None = None,
    failures: Classifier | None = None,
    retry: Retry | None = None,
    approval: bool | Callable[..., Any] | None = None,
    cost: float | Callable[..., float] = 0.0,
    irreversible: bool | None = None,
    secret: tuple[str, ...] = (),
    result_schema: dict[str, Any] | None = None,
    once_per: Callable[..., Any] | None = None,
    once_for: timedelta | float | None = None,
    repeat: RepeatPolicy = "replay",
    provider: Provider | None = None,
    evidence_url: str | None = None,
    approval_expires: timedelta | float | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]:
    """Declare a tool. ``name`` defaults to the function's qualified name and is part
    of the idempotency key, so keep it stable. ``refusals`` are the exceptions that
    mean the provider definitely did not act; any other exception leaves the outcome
    unknown. ``drift`` is what to do when a recorded step is asked again with other
    arguments: ``error`` (default for create, payment, destructive) or ``warn``.
    ``probe`` asks the provider what happened to an effect whose outcome is unknown
    (see ``oncelog.Found``). ``dedupe_window`` declares that the provider answers a
    repeated idempotency key with the first request's result, for that long after the
    key was first sent (Stripe: 24 hours): an effect in doubt younger than that is sent
    again with the same key and arguments instead of halting; older, it is not called
    again on a probe's "not found" alone; the tool must take ``idempotency_key``.
    (``key_ttl``, its older name, warns: it once only bounded a probe.) ``preflight``
    is asked before each attempt (``Found``: recorded done, not called; ``Conflict``:
    a person decides). ``failures`` says what an exception of the call means (see
    ``oncelog.failures``); ``retry`` (an ``oncelog.Retry``) makes again, with the same
    key, an attempt that was certainly not performed. ``approval`` (default: for
    ``destructive`` tools) makes every attempt wait for a person's approval of its
    exact arguments. ``cost`` (a number, or a function of the call's arguments) is
    charged to the run's budget per attempt; ``irreversible`` (default: for payment
    and destructive tools) counts against its irreversible actions. ``secret`` names
    fields (arguments, and keys at any depth of the arguments and the result) recorded
    only as a keyed hash: they never reach the store, the journal, the logs or an
    export (needs ``oncelog.open(redaction_key=...)``). ``result_schema`` (a JSON Schema)
    is what a person's result must match when they resolve one of its effects as done
    (``oncelog resolve ... done``); it is stored in the ledger at the tool's first use.
    ``once_per`` (a function of the call's arguments returning a string or a tuple of
    JSON scalars, e.g. ``lambda order_id, amount: ("refund", order_id)``) names what the
    effect acts on, its subject: the ledger lets one step of any run act on a subject;
    another run asking later gets that step's result without a call (``repeat="error"``:
    ``SubjectDone``), and the idempotency key derives from the subject. ``once_for``
    frees a done subject after that long (default: never). ``provider`` (one of
    ``oncelog.providers``) gives the provider's published ``dedupe_window``, its classifier
    of the answers to a repeated key, and its probe where one ships; the tool's own
    arguments win, but a ``dedupe_window`` longer than the provider's is refused.
    ``evidence_url`` is where a person looks an effect up at the provider, a template of
    ``{key}`` (and ``{run}``, ``{step}``), e.g.
    ``"https://dashboard.example/payments?key={key}"``: notices and the console show it
    filled in. ``approval`` may also be a function of the call's arguments returning a bool
    (``lambda order, amount: amount > 100``): asked once per step, with the arguments as
    recorded, and a step it once sent to a person keeps needing one. ``approval_expires``
    bounds how long a person's approval holds after the decision (default: 24 hours), by the
    ledger's clock: unused by then, the step asks for a fresh one."""

    try:
        kind = Kind(kind)
    except ValueError:
        raise ConfigurationError(
            f"unknown tool kind {kind!r}; use one of {[k.value for k in Kind]}"
        ) from None
    if drift not in (None, "error", "warn"):
        raise ConfigurationError(f"drift must be 'error' or 'warn', not {drift!r}")
    if name:
        check_name(name, "a tool's name")
    if dedupe_window is not None and key_ttl is not None:
        raise ConfigurationError("key_ttl is the older name of dedupe_window: give one of them")
    if key_ttl is not None:
        # It once only bounded a probe's "not found"; as dedupe_window it also resends an
        # effect in doubt without a probe, where a tool so declared used to halt.
        warnings.warn(
            "key_ttl is now dedupe_window: an effect in doubt inside it is sent again with "
            "the same key, without a probe or a person; declare dedupe_window instead",
            DeprecationWarning,
            stacklevel=2,
        )
    if retry is not None and not isinstance(retry, Retry):
        raise ConfigurationError(f"retry must be an oncelog.Retry, not {retry!r}")
    window = key_ttl if dedupe_window is None else dedupe_window
    probe, window, failures = with_provider(provider, probe, _seconds(window), failures)
    policies = ToolSpec(
        name=name or "",  # the function's qualified name, once there is a function
        kind=kind,
        refusals=refusals,
        drift=drift or default_drift(kind),
        takes_key=False,  # ... and what its signature takes
        idempotent=kind.idempotent,
        probe=probe,
        dedupe_window=_seconds(window),
        preflight=preflight,
        failures=failures,
        retry=retry,
        approval=_approval(kind, approval),
        cost=cost if callable(cost) else numbers.amount(cost, "cost"),
        irreversible=kind in (Kind.PAYMENT, Kind.DESTRUCTIVE)
        if irreversible is None
        else irreversible,
        secret=frozenset(secret),
        result_schema=result_schema,
        once_per=once_per,
        once_for=_subject_policy(once_per, once_for, repeat, window),
        repeat_error=repeat == "error",
        evidence_url=None if evidence_url is None else checked_evidence_url(evidence_url),
        approval_expires=APPROVAL_LIFE
        if approval_expires is None
        else numbers.seconds(approval_expires, "approval_expires"),
    )

    def declare(fn: Callable[P, R]) -> Tool[P, R]:
        return Tool(fn, _for_function(policies, fn))

    return declare
