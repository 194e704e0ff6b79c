"""Draining a process on SIGTERM: finish the step in progress, start nothing new.

Kubernetes sends SIGTERM, waits ``terminationGracePeriodSeconds``, then SIGKILLs. Opt in
with ``oncelog.handle_sigterm()`` (``run_main(..., drain_on_sigterm=True)`` and workers do
it for you): the handler only sets a flag, so the call in progress returns and its outcome
is recorded; the next step raises ``Draining`` instead of starting, the run is queued again
with its lease released, and the process exits with 75.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import FrameType

_requested = threading.Event()
_ignored_at_exit = False


def drain() -> None:
    """Start no new step in this process from now on."""
    _requested.set()


def draining() -> bool:
    """Whether this process drains (SIGTERM under ``handle_sigterm``, or ``drain()``): the
    step in progress finishes and is recorded, no new one starts."""
    return _requested.is_set()


# ``draining`` for the engine, which asks before every live step: the event's own method,
# not a function that calls it, is one frame fewer.
is_set: Callable[[], bool] = _requested.is_set


def handle_sigterm() -> None:
    """Drain on SIGTERM (from the main thread; a second SIGTERM changes nothing)."""
    global _ignored_at_exit
    import atexit
    import signal  # here: the module builds three enums, which every open would pay

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        drain()

    signal.signal(signal.SIGTERM, on_sigterm)
    if not _ignored_at_exit:
        # While the interpreter shuts down it puts SIGTERM back to its default, so a
        # SIGTERM then would kill a process that has finished (exit -15 instead of its
        # code); ignored, it changes nothing, as it would have a moment earlier.
        atexit.register(signal.signal, signal.SIGTERM, signal.SIG_IGN)
        _ignored_at_exit = True


def wait_for_drain(timeout: float) -> bool:
    """Sleep up to ``timeout`` seconds, waking at once when draining starts; True then."""
    return _requested.wait(timeout)
