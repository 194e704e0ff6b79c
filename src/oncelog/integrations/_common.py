"""What every framework guard shares: tool policies, step ids, the key of the call in
progress, finding the run a framework callback executes in, and refusing a tool that a
recorded agent could call unguarded."""

from __future__ import annotations

import contextvars
import hashlib
import json
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from oncelog import (
    AsyncRun,
    ConfigurationError,
    Kind,
    KindName,
    NoActiveRun,
    Probe,
    Run,
    RunStopped,
    Tool,
    UnguardedTool,
    UsageError,
    current_run,
    tool,
)

from ..display import install_line
from ..failures import Classifier


@dataclass(frozen=True)
class Policy:
    """How oncelog treats one framework tool: the options of ``oncelog.tool`` that matter
    for a tool someone else defined. A plain kind name (``"create"``) is the short form.

    A probe is called as ``probe(idempotency_key, arguments)`` with the arguments dict the
    model gave the tool. ``key_ttl`` is the older name of ``dedupe_window`` and warns.
    ``once_per`` is called with the model's arguments by name (``lambda to, subject,
    **_: ("email", to, subject)``; arguments that are not a JSON object come as one value)
    and names the effect's subject, as ``oncelog.tool``'s does, with ``once_for`` and
    ``repeat``: a model asked again, in another run, gets the first call's result.
    ``failures`` says what an exception the tool raised means (``oncelog.failures``:
    a call certainly not performed is recorded not done, and made again when asked)."""

    kind: Kind | KindName
    probe: Probe | None = None
    key_ttl: timedelta | float | None = None
    refusals: tuple[type[BaseException], ...] = ()
    approval: bool | None = None
    cost: float | Callable[..., float] = 0.0
    result_schema: dict[str, Any] | None = None
    dedupe_window: timedelta | float | None = None  # after it: positional fields keep their place
    once_per: Callable[..., Any] | None = None
    once_for: timedelta | float | None = None
    repeat: Literal["replay", "error"] = "replay"
    failures: Classifier | None = None  # last: the fields before it keep their positions

    def __post_init__(self) -> None:
        try:
            Kind(self.kind)
        except ValueError:
            raise ConfigurationError(
                f"unknown tool kind {self.kind!r}; use one of {[k.value for k in Kind]}"
            ) from None
        if self.once_per is not None or self.once_for is not None or self.repeat != "replay":
            # Refused where the guard is built, not at the model's first call of the tool.
            window = self.key_ttl if self.dedupe_window is None else self.dedupe_window
            declare = tool(
                kind=self.kind, once_per=self.once_per, once_for=self.once_for,
                repeat=self.repeat, dedupe_window=window,
            )  # fmt: skip
            declare(_keyed_call)

    def tool(self, name: str, fn: Callable[..., Any]) -> Tool[..., Any]:
        """``fn`` declared as the oncelog tool ``name`` under this policy."""
        declare = tool(
            kind=self.kind, name=name, refusals=self.refusals, failures=self.failures,
            probe=self.probe,
            dedupe_window=self.dedupe_window, key_ttl=self.key_ttl, approval=self.approval,
            cost=self.cost, result_schema=self.result_schema,
            once_per=None if self.once_per is None else _by_name(self.once_per),
            once_for=self.once_for, repeat=self.repeat,
        )  # fmt: skip
        return declare(fn)


def _keyed_call(arguments: Any, *, idempotency_key: str) -> None:
    """What every guard declares: a call with the model's arguments, keyed."""


def _by_name(once_per: Callable[..., Any]) -> Callable[[Any], Any]:
    """``once_per`` called with the model's arguments as the framework's tool takes them:
    by name (a guard's effect gets them as one dict)."""

    def subject(arguments: Any) -> Any:
        return once_per(**arguments) if isinstance(arguments, dict) else once_per(arguments)

    return subject


PolicyLike = Policy | Kind | KindName


def policies(kinds: Mapping[str, PolicyLike]) -> dict[str, Policy]:
    """Validate a mapping of tool names to policies or kind names."""
    return {name: p if isinstance(p, Policy) else Policy(p) for name, p in kinds.items()}


def policy_for(table: Mapping[str, Policy], name: str, framework: str) -> Policy:
    try:
        return table[name]
    except KeyError:
        kinds = "read | upsert | create | payment | destructive"
        fix = f"Give it a kind: kinds={{{name!r}: KIND}} ({kinds})"
        raise unguarded(framework, name, fix) from None


def repeatable_names(repeatable: Iterable[str], kinds: Mapping[str, Any]) -> frozenset[str]:
    """The tools declared safe to run again on every replay, unguarded; a tool cannot be
    both guarded and repeatable."""
    names = frozenset(repeatable if not isinstance(repeatable, str) else (repeatable,))
    both = sorted(names & set(kinds))
    if both:
        raise ConfigurationError(f"tools {both} are in both kinds= and repeatable=; pick one")
    return names


# -- tools a recorded model may ask for -----------------------------------------------------

GuardMark = Literal["guarded", "repeatable"]
_MARK = "_oncelog_guard"


def mark(tool: Any, how: GuardMark) -> None:
    """Remember on a framework's tool object that oncelog guards it, or was told that it
    is safe to repeat."""
    setattr(tool, _MARK, how)


def marked(tool: Any) -> GuardMark | None:
    how: GuardMark | None = getattr(tool, _MARK, None)
    return how


def unguarded(framework: str, tool: str, fix: str) -> UnguardedTool:
    """The error for a tool a recorded agent could call without oncelog: refused before the
    first model call, since a replay would run it again, silently."""
    return UnguardedTool(
        f"{framework} tool {tool!r} is not guarded: the model's calls are recorded, so every "
        f"replay would run it again. {fix}, or declare it safe to repeat with "
        f"repeatable=[{tool!r}] if running it again is harmless",
        tool=tool,
    )


def missing_extra(extra: str, framework: str) -> ConfigurationError:
    return ConfigurationError(
        f"oncelog's {framework} integration needs {framework}: {install_line(extra)}"
    )


# -- the idempotency key of the effect being called ---------------------------------------

_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("oncelog_key", default=None)


def current_idempotency_key() -> str:
    """The idempotency key of the guarded tool call in progress: a framework tool passes it
    on to its provider (Stripe's ``idempotency_key``, an ``Idempotency-Key`` header)."""
    key = _key.get()
    if key is None:
        raise NoActiveRun("current_idempotency_key() is only known inside a guarded tool call")
    return key


@contextmanager
def keyed(key: str) -> Iterator[None]:
    token = _key.set(key)
    try:
        yield
    finally:
        _key.reset(token)


# -- runs and step ids --------------------------------------------------------------------

# Per run, how many steps of each name it has asked for: ``send_email#2`` is the second.
_counts: weakref.WeakKeyDictionary[Run | AsyncRun, Counter[str]] = weakref.WeakKeyDictionary()


def next_step_id(run: Run | AsyncRun, name: str) -> str:
    """A stable step id: the name and how many times this run asked for it, never an id a
    model made up (a model asked again names its calls anew)."""
    counts = _counts.setdefault(run, Counter())
    counts[name] += 1
    return f"{name}#{counts[name]}"


@contextmanager
def model_step(run: Run | AsyncRun, name: str) -> Iterator[str]:
    """``next_step_id`` for a model call, given back if the call raises anything but a
    stop: the run gave its position back too (a model call that raised records nothing),
    so the framework's retry is this step, at this position, as it is on a replay where
    the call does not fail (``ReplayCursor.give_back``)."""
    step = next_step_id(run, name)
    try:
        yield step
    except RunStopped:
        raise
    except Exception:
        _counts[run][name] -= 1
        raise


def sync_run(framework: str) -> Run:
    run = current_run()
    if run is None:
        raise NoActiveRun(f"a guarded {framework} call ran outside `with ledger.run(...)`")
    if not isinstance(run, Run):
        raise UsageError(
            f"a synchronous {framework} call ran inside `async with ledger.run(...)`; "
            "use the framework's async API there"
        )
    return run


def async_run(framework: str) -> AsyncRun:
    run = current_run()
    if run is None:
        raise NoActiveRun(f"a guarded {framework} call ran outside `async with ledger.run(...)`")
    if not isinstance(run, AsyncRun):
        raise UsageError(
            f"{framework} calls are asynchronous: run the agent inside "
            "`async with ledger.run(...)`, not `with`"
        )
    return run


ModelDrift = Literal["error", "warn"]


def model_drift(drift: object) -> ModelDrift:
    """A recorded model's ``drift=``: what a model call asked at a recorded position with
    other input than recorded does. ``"error"`` (the default) stops the run with
    ``ArgumentDrift``, for a person: the answer recorded there was to another question.
    ``"warn"`` returns the recorded answer and logs a warning: an explicit choice."""
    if drift not in ("error", "warn"):
        raise ConfigurationError(f"drift must be 'error' or 'warn', not {drift!r}")
    return "error" if drift == "error" else "warn"


def digest(value: Any) -> str:
    """A model call's input, recorded as a hash: replay compares it (``model_drift``), and
    a transcript that grows with every turn is not stored again at every step."""
    text = json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_arguments(raw: str) -> Any:
    """A model's JSON arguments as a value, or the text itself if it is not JSON."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return raw
