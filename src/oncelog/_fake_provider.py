"""A provider for tests (``oncelog.testing.FakeProvider``): in memory, deduplicating by
idempotency key as Stripe does, with a clock the test moves, so that a key's expiry is
tested without sleeping, and failures scripted call by call."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._exceptions import ConfigurationError
from .runtime._probes import NOT_FOUND, Found, ProbeAnswer
from .runtime._tools import Kind, KindName, Tool, tool

Failure = Literal["before", "after", "refuse"]


class FakeClock:
    """Epoch seconds that move only when the test says: ``clock.advance(3600)``. It starts
    at the wall clock's time, so that it can be compared with times the ledger recorded."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ConfigurationError(f"a clock does not go back ({seconds} seconds)")
        self.now += seconds


class Refused(Exception):
    """The provider's definite "no" (a declined card): nothing was performed."""


@dataclass(frozen=True)
class Performed:
    """One effect the provider performed: its key, request, answer and time."""

    key: str
    request: Any
    answer: Any
    at: float


class FakeProvider:
    """The outside world for a test. ``call(key, request)`` performs an effect once per
    idempotency key: a key it still honours (not older than ``key_ttl`` by ``clock``)
    returns the first answer and performs nothing, as a provider with keys does; an
    expired key performs again, as a real provider would. ``probe`` finds an effect by
    key. ``fail_next`` scripts the next calls: ``"before"`` raises without performing,
    ``"after"`` performs and raises (the answer lost on the way back: an effect in
    doubt), ``"refuse"`` raises ``Refused`` without performing. ``answer(request)`` is
    what it answers (by default ``{"id": "fx_N", "request": request}``); an exception it
    raises is the provider's, and nothing is performed. ``key_ttl=0`` makes a provider
    that honours no key. Thread-safe."""

    def __init__(
        self,
        *,
        key_ttl: float | None = None,
        clock: Callable[[], float] | None = None,
        answer: Callable[[Any], Any] | None = None,
    ) -> None:
        self.key_ttl = key_ttl
        self.clock = clock if clock is not None else FakeClock()
        self.answer = answer
        self.performed: list[Performed] = []  # every effect, in order
        self.requests: list[str] = []  # the key of every call received
        self._by_key: dict[str, Performed] = {}
        self._script: deque[tuple[Failure, BaseException | None]] = deque()
        self._lock = threading.Lock()

    def fail_next(self, how: Failure, error: BaseException | None = None) -> None:
        """Make the next call not yet scripted fail so (``error`` for before and after,
        by default a ``ConnectionError``)."""
        self._script.append((how, error))

    def call(self, key: str, request: Any = None) -> Any:
        with self._lock:
            self.requests.append(key)
            how, error = self._script.popleft() if self._script else (None, None)
            if how == "refuse":
                raise Refused(f"refused request with key {key!r}")
            if how == "before":
                raise error or ConnectionError("connection reset before the request was read")
            done = self._honoured(key)
            if done is None:
                answer = (
                    {"id": f"fx_{len(self.performed) + 1}", "request": request}
                    if self.answer is None
                    else self.answer(request)
                )
                done = Performed(key, request, answer, self.clock())
                self.performed.append(done)
                self._by_key[key] = done
            if how == "after":
                raise error or ConnectionError("connection reset before the answer arrived")
            return done.answer

    def probe(self, key: str, request: Any = None) -> ProbeAnswer:
        """Whether an effect with ``key`` was performed (and is still known by its key)."""
        with self._lock:
            done = self._honoured(key)
        return NOT_FOUND if done is None else Found(done.answer)

    def times_performed(self, key: str) -> int:
        return sum(1 for done in self.performed if done.key == key)

    def tool(
        self, *, kind: Kind | KindName = "create", name: str = "fake", probe: bool = True
    ) -> Tool[..., Any]:
        """An oncelog tool calling this provider: ``run.effect(step, tool, request)``,
        with this provider's ``probe``, and its ``key_ttl`` as the tool's ``dedupe_window``,
        declared unless ``probe=False``.
        Give the ledger the same clock (``oncelog.testing.use_clock``) so that it judges
        a key's age as the provider does."""

        def perform(request: Any = None, *, idempotency_key: str) -> Any:
            return self.call(idempotency_key, request)

        declare = tool(
            kind=kind, name=name, refusals=(Refused,),
            probe=self.probe if probe else None,
            dedupe_window=self.key_ttl if probe else None,
        )  # fmt: skip
        return declare(perform)

    def _honoured(self, key: str) -> Performed | None:
        done = self._by_key.get(key)
        if done is None or (self.key_ttl is not None and self.clock() - done.at >= self.key_ttl):
            return None
        return done
