"""Failures of the ``requests`` client (imported only if the program already did).

- a ``ConnectionError`` (``ConnectTimeout`` included) whose cause is urllib3's
  ``NewConnectionError`` (refused, DNS failure) or ``ConnectTimeoutError``, raised by
  requests' own adapter in the call's first request, after urllib3 retries (a ``Retry``
  mounted on the adapter) that all failed to connect: the connection was never made:
  not performed.
- the same error after urllib3 retried anything else (a dropped connection, a read
  error, a status in ``status_forcelist``: the request was sent before), in a request
  after the first (a redirect followed, an ``auth`` round: the provider answered the
  first), or raised through an adapter that is not requests' own: in doubt. The
  traceback says which request failed, through what and after which retries; a shape it
  does not know is in doubt.
- ``URLRequired``, ``MissingSchema``, ``InvalidSchema``, ``InvalidURL``,
  ``InvalidHeader``: never sent: refused.
- ``HTTPError`` with a response (from ``raise_for_status``): by status (``by_status``).
- any other ``RequestException`` (``ReadTimeout``, "Connection aborted", a reset after
  sending, ``ProxyError``, ``RetryError``): in doubt.
"""

from __future__ import annotations

import sys

from . import Failure, by_status
from ._sends import called, frames_from, only_in

_FIRST_SEND = [("requests.sessions", "send"), ("requests.adapters", "send")]


def classify(exc: BaseException) -> Failure | None:
    requests = sys.modules.get("requests")
    if requests is None:  # a requests error cannot exist unless requests was imported
        return None
    errors = requests.exceptions
    if isinstance(exc, errors.ConnectionError) and _never_connected(exc):
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
    """The call's one request failed to connect, at every try urllib3 made."""
    urllib3 = sys.modules.get("urllib3")
    if urllib3 is None or not exc.args:
        return False
    gave_up = exc.args[0]  # the adapter raises with urllib3's MaxRetryError
    if not isinstance(gave_up, urllib3.exceptions.MaxRetryError):
        return False
    connecting = urllib3.exceptions.ConnectTimeoutError  # NewConnectionError is one
    if not isinstance(gave_up.reason, connecting):
        return False
    frames = frames_from(exc, "requests")
    calls = called(frames)
    if not only_in(frames, "requests") or calls[-2:] != _FIRST_SEND:
        return False
    if calls.count(_FIRST_SEND[0]) != 1:  # a redirect is sent by a nested Session.send
        return False
    # MaxRetryError is raised in Retry.increment, whose Retry holds the tries before.
    retried = frames_from(gave_up, "urllib3")
    if called(retried[-1:]) != [("urllib3.util.retry", "increment")]:
        return False
    history = getattr(retried[-1].f_locals.get("self"), "history", None)
    if not isinstance(history, tuple):
        return False
    return all(
        isinstance(earlier.error, connecting)
        and earlier.status is None
        and earlier.redirect_location is None
        for earlier in history
    )
