"""Failures of the ``requests`` client (imported only if the program already did).

- ``ConnectTimeout``, and a ``ConnectionError`` whose cause is urllib3's
  ``NewConnectionError`` (refused, DNS failure) or ``NameResolutionError``: the
  connection was never made: not performed.
- ``URLRequired``, ``MissingSchema``, ``InvalidSchema``, ``InvalidURL``,
  ``InvalidHeader``: never sent: refused.
- ``HTTPError`` with a response (from ``raise_for_status``): by status (``by_status``).
- any other ``RequestException`` (``ReadTimeout``, "Connection aborted", a reset after
  sending): in doubt.
"""

from __future__ import annotations

import sys

from . import Failure, by_status


def classify(exc: BaseException) -> Failure | None:
    requests = sys.modules.get("requests")
    if requests is None:  # a requests error cannot exist unless requests was imported
        return None
    errors = requests.exceptions
    if isinstance(exc, errors.ConnectTimeout) or _never_connected(exc):
        return Failure.NOT_PERFORMED
    never_sent = (errors.URLRequired, errors.MissingSchema, errors.InvalidSchema,
                  errors.InvalidURL, errors.InvalidHeader)  # fmt: skip
    if isinstance(exc, never_sent):
        return Failure.REFUSED
    if isinstance(exc, errors.HTTPError) and exc.response is not None:
        return by_status(exc.response.status_code)
    if isinstance(exc, errors.RequestException):
        return Failure.IN_DOUBT
    return None


def _never_connected(exc: BaseException) -> bool:
    """A ``ConnectionError`` whose retries all failed to open a connection."""
    requests, urllib3 = sys.modules.get("requests"), sys.modules.get("urllib3")
    if requests is None or urllib3 is None:
        return False
    if not isinstance(exc, requests.exceptions.ConnectionError) or not exc.args:
        return False
    reason = getattr(exc.args[0], "reason", exc.args[0])
    return isinstance(reason, urllib3.exceptions.NewConnectionError)
