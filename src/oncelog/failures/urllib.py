"""Failures of ``urllib.request.urlopen``.

- ``HTTPError``: the provider answered: by status (``by_status``).
- ``URLError`` whose reason is ``ConnectionRefusedError`` or a DNS failure
  (``socket.gaierror``), and those errors raised bare: no connection was made: not
  performed. (``urlopen`` wraps only what fails while connecting and sending.)
- ``ValueError`` for an unknown URL type is not classified (it is no network error).
- any other ``URLError`` or ``OSError`` (a timeout, a reset, ``RemoteDisconnected``
  while reading the answer): in doubt.
"""

from __future__ import annotations

import socket
import urllib.error

from . import Failure, by_status


def classify(exc: BaseException) -> Failure | None:
    if isinstance(exc, urllib.error.HTTPError):
        return by_status(exc.code)
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (ConnectionRefusedError, socket.gaierror)):
        return Failure.NOT_PERFORMED
    if isinstance(exc, OSError):
        return Failure.IN_DOUBT
    return None
