"""What the effect engine hands around: the step the agent asked for (``Call``), a step
running live (``Pending``), a replayed result, the process around the engine
(``Surroundings``), and the deterministic idempotency key."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from json.encoder import encode_basestring_ascii as _quote  # json.dumps's C escaper
from typing import Any

from .._exceptions import InvalidPayload, UnserializableValue
from .._log import log
from ..failures import Failure
from ..observe import _observe as observe
from ..process._heartbeat import HEARTBEATS
from ..records._records import ApprovalEdit, StepState, StepType
from ..records._redact import redact
from ..records._serialization import MAX_DEPTH, encode
from ..records._value import NamedTuple
from ..signals import _drain as drain
from ..stores._protocol import Lease, NewStep
from ._tools import ToolSpec

KEY_PREFIX = "ol1_"
_LLM = StepType.LLM  # a global: reading an enum member off its class costs far more


def edited_step(step_id: str, edit: ApprovalEdit | None) -> str:
    """What an edited call's key derives from in place of its step id: the edited
    request's own (a step id cannot hold NUL, so no step's key can be the same)."""
    return step_id if edit is None else f"{step_id}\x00edit {edit.edited_request}"


def idempotency_key(run_id: str, step_id: str, tool: str, namespace: str = "") -> str:
    """Deterministic in (run, step, tool) only: never the payload, never an attempt count.
    ``namespace`` separates services that could give runs the same id at one provider; it
    must be as stable as the run id (a new random one after a lost ledger would defeat
    the provider's deduplication)."""
    # json.dumps(parts) of the names (strings), spliced: its Python layers cost more than
    # the rest of the key.
    parts = f"{_quote(run_id)}, {_quote(step_id)}, {_quote(tool)}"
    if namespace:
        parts = f"{_quote(namespace)}, {parts}"
    # ``digest`` without its call: once per live step.
    return KEY_PREFIX + sha256(f"[{parts}]".encode()).hexdigest()[:40]


@dataclass(slots=True)
class Call:
    """One step the agent asked for."""

    step_id: str | None
    step_type: StepType
    spec: ToolSpec
    payload: Any  # {"args": [...], "kwargs": {...}} as recorded (secret fields hashed)
    args_json: str | None  # canonical JSON, checked to the letter; None until a live step
    fn: Callable[..., Any]  # what runs it: the tool's function, the model call, the query
    secret_key: bytes | None = None  # hashes the tool's secret fields
    # The person's edit this call runs instead of the arguments asked (``_approval_policy``),
    # and whether the step ever asked a person: read only for tools that may need one.
    edit: ApprovalEdit | None = None
    asked: bool = False

    def recordable(self, result: Any) -> Any:
        """``result`` as it may be recorded: its secret fields hashed."""
        if self.secret_key is None:
            return result
        try:
            return redact(result, self.spec.secret, self.secret_key)
        except RecursionError:
            raise UnserializableValue(
                f"result is nested more than {MAX_DEPTH} levels deep"
            ) from None

    @property
    def tool(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return "llm" if self.step_type is _LLM else self.spec.kind._value_

    @property
    def idempotent(self) -> bool:
        return self.spec.idempotent

    @property
    def drift(self) -> str:
        return self.spec.drift

    @property
    def refusals(self) -> tuple[type[BaseException], ...]:
        return self.spec.refusals


def _uniform() -> float:
    # random is imported by the first retry wait: most runs never wait.
    import random

    return random.random()


@dataclass(frozen=True)
class Surroundings:
    """What the engine needs from the process it runs in, passed in rather than read from
    module globals, so a test can give an engine its own."""

    draining: Callable[[], bool] = drain.is_set
    lease_lost: Callable[[Lease], bool] = HEARTBEATS.lost
    observers: Sequence[observe.Observer] = field(default_factory=lambda: observe.OBSERVERS)
    clock: Callable[[], float] = time.time
    # What a key's age is measured by: None, the store's clock, which wrote the first send
    # (a worker's clock may lag the server's); a test's own clock (``use_clock``) instead.
    key_clock: Callable[[], float] | None = None
    sleep: Callable[[float], object] = drain.wait_for_drain  # wakes when draining starts
    random: Callable[[], float] = _uniform  # the jitter of retry waits


@dataclass(frozen=True)
class Again:
    """A failed attempt is made again at the same position: ``prepare`` it again."""


def failure_of(spec: ToolSpec, exc: BaseException) -> Failure:
    """What the exception of a call means: a declared refusal, the tool's classifier's
    answer, or, when neither knows, in doubt."""
    if isinstance(exc, spec.refusals):
        return Failure.REFUSED
    if spec.failures is not None:
        try:
            found = spec.failures(exc)
        except Exception as error:  # a classifier's bug must not hide the call's error
            log.warning("the failures classifier of %s raised %r", spec.name, error)
            return Failure.IN_DOUBT
        if isinstance(found, Failure):
            return found
    return Failure.IN_DOUBT


class Replayed(NamedTuple):
    """What a recorded step hands back. A named tuple: replay makes one per step."""

    value: Any


class Adopted(Exception):
    """Carries the result of another run's step on the subject out of the intent's write
    to ``Engine.prepare``, which hands it back as this step's."""

    def __init__(self, replayed: Replayed) -> None:
        super().__init__()
        self.replayed = replayed


@dataclass(slots=True)
class Pending:
    """A step that runs live: its intent is durable if it is an effect. Made once per live
    step and never changed after its observers are told it started (not frozen: a frozen
    dataclass's ``__init__`` costs a call per field)."""

    step: NewStep
    call: Call
    attempt: int
    previous: StepState | None
    observers: Sequence[observe.Observer] = ()
    observed: list[Any] | None = None  # what observers returned when it started
    # Taken just before the call: a model call or a read is recorded after it, in one
    # commit, and its duration must be the call's, not the commit's.
    began: float = field(default_factory=time.monotonic)

    def info(self, run_id: str) -> observe.StepInfo:
        step = self.step
        return observe.StepInfo(run_id, step.step_id, step.tool, step.kind, step.key, self.attempt)

    def ended(self, run_id: str, outcome: str, error: BaseException | None = None) -> None:
        if self.observed is not None:
            error_type = None if error is None else type(error).__qualname__
            observe.ended(self.observers, self.info(run_id), self.observed, outcome, error_type)


def encode_args(payload: Any, limit: int, run_id: str, step_id: str | None) -> str:
    """The arguments' canonical JSON, refused with the step named if JSON cannot hold
    them exactly. A step that will run live is encoded before it takes its position, so
    a caught error leaves no gap; one that replays is compared with the recorded
    arguments instead, and encoded only if it turns out to run."""
    try:
        return encode(payload, what="arguments", limit=limit)
    except InvalidPayload as exc:
        raise type(exc)(exc.message, run_id=run_id, step_id=step_id) from None


def usage(result: Any) -> tuple[int, int, float | None]:
    """Token counts (OpenAI- or Anthropic-shaped) and a cost, if the response carries them."""
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return 0, 0, None
    # Each name looked up once, the other one only when it is absent (once per model call).
    tokens_in = usage["prompt_tokens"] if "prompt_tokens" in usage else usage.get("input_tokens")
    tokens_out = (
        usage["completion_tokens"] if "completion_tokens" in usage else usage.get("output_tokens")
    )
    cost = usage.get("cost")
    return (
        tokens_in if type(tokens_in) is int else int(tokens_in or 0),
        tokens_out if type(tokens_out) is int else int(tokens_out or 0),
        float(cost) if isinstance(cost, (int, float)) else None,
    )


def error_json(exc: BaseException) -> str:
    # A lone surrogate in the message (a path decoded with surrogateescape) is written as
    # its escape: the error is recorded, whatever the tool put in its message.
    message = str(exc)[:2000].encode("utf-8", "backslashreplace").decode()
    return encode(
        {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": message},
        what="error",
        limit=1 << 20,
    )
