"""Up to N runs at once in one process: synchronous ones each in a thread of a pool,
asynchronous ones as tasks on one event loop, itself in a thread of its own.

It knows nothing of runs: a job is a callable or a coroutine function that never raises
(the worker reports how each run ended). What each run keeps for itself (its lease, its
heartbeat, its fencing token, its place in the drain) it keeps through the ledger as a run
on its own would; the fleet only counts the slots, so a job that hangs holds one slot and
the others go on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported once the first job comes: asyncio (see runtime/_run._in_thread) and the
    # thread pool (a few milliseconds) are not for a worker of one run at a time.
    import asyncio
    from concurrent.futures import Future, ThreadPoolExecutor

from ..signals import _drain as drain

# Seconds between looks at the drain flag while waiting for a slot or a change: SIGTERM
# sets an event this module cannot be woken by as well as by its own condition.
LOOK = 0.05


class Fleet:
    """Slots for ``size`` jobs; ``close`` waits for all of them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._in_flight = 0
        self._finished = 0  # jobs ended so far: a waiter sees a change by its count
        self._changed = threading.Condition()
        self._threads: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()  # jobs in threads may ask for the loop at once

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def room(self) -> int:
        """Slots free now."""
        return self.size - self._in_flight

    def wait_for_room(self) -> bool:
        """Block until a slot is free (True) or draining starts (False)."""
        with self._changed:
            while self._in_flight >= self.size:
                if drain.draining():
                    return False
                self._changed.wait(LOOK)
        return not drain.draining()

    def wait_for_change(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, waking early when a job ends or draining starts."""
        deadline = time.monotonic() + timeout
        with self._changed:
            seen = self._finished
            while self._finished == seen and not drain.draining():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(min(left, LOOK))

    def start(self, job: Callable[[], None]) -> None:
        """Run ``job`` in a thread of the pool (a slot must be free)."""
        if self._threads is None:
            from concurrent.futures import ThreadPoolExecutor

            self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="oncelog-run")
        self._taken()
        self._threads.submit(job).add_done_callback(self._ended)

    def start_async(self, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``job()`` as a task on the fleet's event loop (a slot must be free)."""
        import asyncio

        loop = self.loop()
        self._taken()
        asyncio.run_coroutine_threadsafe(job(), loop).add_done_callback(self._ended)

    def close(self) -> None:
        """Wait for every job to end, then stop the pool and the loop (again: nothing)."""
        with self._changed:
            while self._in_flight:
                self._changed.wait()
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown()
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None and self._loop_thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._loop_thread.join()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _taken(self) -> None:
        with self._changed:
            self._in_flight += 1

    def _ended(self, future: Future[None]) -> None:
        with self._changed:
            self._in_flight -= 1
            self._finished += 1
            self._changed.notify_all()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the fleet's coroutines run on, started at the first call."""
        with self._loop_lock:
            return self._loop or self._start_loop()

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        loop = asyncio.new_event_loop()
        # A run's store calls go to worker threads (``asyncio.to_thread``): as many as the
        # fleet has slots, up to the pool's own default cap, so N waiting runs record
        # their steps side by side where the store lets them.
        loop.set_default_executor(
            ThreadPoolExecutor(min(self.size, 32), thread_name_prefix="oncelog-store")
        )
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

        self._loop_thread = threading.Thread(target=serve, name="oncelog-runs", daemon=True)
        self._loop_thread.start()
        ready.wait()
        self._loop = loop
        return loop
