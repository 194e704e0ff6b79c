"""Holds on a resource: ``with run.hold(("host", "db-1")) as hold:`` keeps every other run
from taking that resource until the block ends or the run's lease lapses, and the hold's
token (greater for every new holder) is handed to tools that declare ``hold_token``, so a
provider can refuse a holder that lost its hold. The rules are the store's
(``stores/_sql_holds.py``); this module names the resource, waits, and counts nesting.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from types import TracebackType
from typing import Any

from .._exceptions import HoldInDoubt, InvalidPayload, LeaseLost, ResourceHeld, UsageError
from ..records._serialization import encode
from ..signals import _drain as drain
from ..stores._protocol import Lease, Store

MAX_RESOURCE_BYTES = 1024
# Between tries for a hold another run has: short at first (a holder's block is often
# a few steps), then at most a second.
FIRST_PAUSE, LONGEST_PAUSE = 0.05, 1.0

# The tokens of the holds the current context is inside, innermost last.
HOLD_TOKENS: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "oncelog_hold_tokens", default=()
)


def resource_name(name: Any, run_id: str | None = None) -> str:
    """A hold's name as stored: a string, or a non-empty tuple or list of JSON scalars,
    as a canonical JSON array (``"db-1"`` is ``["db-1"]``)."""
    parts = [name] if isinstance(name, str) else name
    if not isinstance(parts, (tuple, list)) or not parts or not all(map(_scalar, parts)):
        raise InvalidPayload(
            "a hold's name is a string or a non-empty tuple of JSON scalars (str, int, "
            f"finite float, bool, None), such as ('host', 'db-1'); not {name!r}",
            run_id=run_id,
        )
    return encode(list(parts), what="a hold's name", limit=MAX_RESOURCE_BYTES)


def _scalar(part: Any) -> bool:
    if isinstance(part, float):
        return math.isfinite(part)
    return part is None or isinstance(part, (str, int, bool))


def innermost_token(run_id: str, tool: str) -> int:
    """The token a tool declaring ``hold_token`` is handed: the innermost hold's."""
    tokens = HOLD_TOKENS.get()
    if not tokens:
        raise UsageError(
            f"tool {tool!r} takes a hold_token but was called outside any `with run.hold(...)`",
            run_id=run_id,
        )
    return tokens[-1]


class Hold:
    """What ``run.hold(name, wait=...)`` returns: enter it with ``with`` in a ``Run``,
    ``async with`` in an ``AsyncRun``. Inside, ``token`` is the hold's fencing token.
    Entering waits up to ``wait`` seconds for another run's hold to end, then raises
    ``ResourceHeld`` (exit 75) if a live process holds that run, or ``HoldInDoubt`` (exit
    3, a person must act) if none does and an effect it began under the hold is in doubt.
    Nested holds of one resource by one run are one hold."""

    def __init__(self, store: Store, lease: Lease, held: dict[str, list[int]], resource: str,
                 wait: float) -> None:  # fmt: skip
        self._store = store
        self._lease = lease
        self._held = held  # the run's: resource -> [token, depth]
        self.resource = resource
        self._wait = wait
        self._outer: contextvars.Token[tuple[int, ...]] | None = None

    @property
    def token(self) -> int:
        entry = self._held.get(self.resource)
        if entry is None:
            raise UsageError(f"the hold on {self.resource} is not taken", run_id=self._lease.run_id)
        return entry[0]

    def _nested(self) -> bool:
        entry = self._held.get(self.resource)
        if entry is not None:
            entry[1] += 1
        return entry is not None

    def _taken(self, token: int) -> None:
        self._held[self.resource] = [token, 1]

    def _pause(self, deadline: float, pause: float, held: ResourceHeld | HoldInDoubt) -> float:
        """How long to sleep before trying again; raises ``held`` once the wait is over
        or the process drains."""
        left = deadline - time.monotonic()
        if left <= 0 or drain.draining():
            raise held
        return min(pause, left)

    def _take(self) -> None:
        if self._nested():
            return
        deadline, pause = time.monotonic() + self._wait, FIRST_PAUSE
        while True:
            try:
                token = self._store.take_hold(self._lease, self.resource)
            except (ResourceHeld, HoldInDoubt) as held:
                drain.wait_for_drain(self._pause(deadline, pause, held))
                pause = min(pause * 2, LONGEST_PAUSE)
                continue
            self._taken(token)
            return

    def _give_up(self) -> None:
        entry = self._held[self.resource]
        entry[1] -= 1
        if entry[1]:
            return
        del self._held[self.resource]
        # LeaseLost: the run is another process's now; the hold lapsed with this lease.
        with contextlib.suppress(LeaseLost):
            self._store.give_up_hold(self._lease, self.resource, entry[0])

    def _push(self) -> None:
        self._outer = HOLD_TOKENS.set((*HOLD_TOKENS.get(), self.token))

    def _pop(self) -> None:
        if self._outer is not None:
            HOLD_TOKENS.reset(self._outer)
            self._outer = None

    def __enter__(self) -> Hold:
        self._take()
        self._push()
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._pop()
        self._give_up()

    async def __aenter__(self) -> Hold:
        import asyncio

        if not self._nested():
            deadline, pause = time.monotonic() + self._wait, FIRST_PAUSE
            while True:
                try:
                    take = self._store.take_hold
                    token = await asyncio.to_thread(take, self._lease, self.resource)
                    self._taken(token)
                    break
                except (ResourceHeld, HoldInDoubt) as held:
                    await asyncio.sleep(self._pause(deadline, pause, held))
                    pause = min(pause * 2, LONGEST_PAUSE)
        self._push()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        import asyncio

        self._pop()
        await asyncio.to_thread(self._give_up)
