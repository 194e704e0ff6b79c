"""Where in a client an exception was raised, read from its traceback.

A refused connection means "not performed" only if no earlier send of the same call got
through: a redirect followed after the provider answered the POST, an authentication
round, a retry after a dropped connection or an error status. The exception itself does
not say which send failed; the frames it passed through do. The classifiers ask for the
one shape of a first send they know and answer in doubt for any other, so a client whose
internals changed, or code of someone else's between the client and its transport, costs
a halt, never a second performance.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import FrameType

Called = tuple[str, str]  # a frame's module and function


def frames_from(exc: BaseException, package: str) -> list[FrameType]:
    """The frames ``exc`` passed through, from the first in ``package`` (the call into
    the client) down to where it was raised; empty if it passed through none."""
    found: list[FrameType] = []
    tb = exc.__traceback__
    while tb is not None:
        if found or _in(_module(tb.tb_frame), package):
            found.append(tb.tb_frame)
        tb = tb.tb_next
    return found


def called(frames: Sequence[FrameType]) -> list[Called]:
    return [(_module(frame), frame.f_code.co_name) for frame in frames]


def only_in(frames: Sequence[FrameType], *packages: str) -> bool:
    """Every frame is the named packages' own: no adapter, transport or handler of
    someone else's ran between the call and the error."""
    return bool(frames) and all(
        any(_in(_module(frame), package) for package in packages) for frame in frames
    )


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")
