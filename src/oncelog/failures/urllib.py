"""Failures of ``urllib.request.urlopen``.

- ``HTTPError``: the provider answered: by status (``by_status``).
- ``URLError`` whose reason is ``ConnectionRefusedError`` or a DNS failure
  (``socket.gaierror``), raised by the standard handlers in the call's first request: no
  connection was made: not performed. (``urlopen`` wraps only what fails while
  connecting and sending.)
- the same error in a later request (a redirect followed: the provider answered the
  first), raised through a handler that is not the standard library's, or raised bare
  (from code the classifier cannot see into): in doubt. The traceback says which request
  failed and through what; a shape it does not know is in doubt.
- ``ValueError`` for an unknown URL type is not classified (it is no network error).
- any other ``URLError`` or ``OSError`` (a timeout, a reset, ``RemoteDisconnected``
  while reading the answer): in doubt.
"""

from __future__ import annotations

import socket
import urllib.error

from . import Failure, by_status
from ._sends import called, frames_from, only_in

_OPEN = ("urllib.request", "open")  # a redirect opens its request from within the first's


def classify(exc: BaseException) -> Failure | None:
    if isinstance(exc, urllib.error.HTTPError):
        return by_status(exc.code)
    if isinstance(exc, urllib.error.URLError):
        never_connected = isinstance(exc.reason, (ConnectionRefusedError, socket.gaierror))
        return Failure.NOT_PERFORMED if never_connected and _first_send(exc) else Failure.IN_DOUBT
    if isinstance(exc, OSError):
        return Failure.IN_DOUBT
    return None


def _first_send(exc: BaseException) -> bool:
    """It failed in the call's one request, inside the standard handlers only."""
    frames = frames_from(exc, "urllib.request")
    calls = called(frames)
    return (
        only_in(frames, "urllib.request")
        and calls[-1:] == [("urllib.request", "do_open")]
        and calls.count(_OPEN) == 1
    )
