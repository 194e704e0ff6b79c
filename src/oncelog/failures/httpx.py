"""Failures of the ``httpx`` client (imported only if the program already did).

- ``ConnectError`` (refused, DNS failure, TLS handshake), ``ConnectTimeout`` and
  ``PoolTimeout`` of the call's first request, sent by httpx's own transport: no
  connection carried the request: not performed. httpcore's ``retries=`` retries only a
  connection that could not be made, and its pool takes another connection only before
  sending, so neither sent the request before.
- the same errors of a later request of the call (a redirect followed, with
  ``follow_redirects=True``, or an ``auth`` round: the provider answered the first), or
  raised through a transport, mount or wrapper that is not httpx's own (it may have sent
  the request and be retrying it): in doubt. The traceback says which request failed and
  through what; a shape it does not know is in doubt.
- ``UnsupportedProtocol``, ``InvalidURL``, ``LocalProtocolError``: never sent, and never
  will be: refused.
- ``HTTPStatusError`` (from ``raise_for_status``): by status, see ``by_status``.
- anything else (``ReadTimeout``, ``WriteTimeout``, ``RemoteProtocolError``,
  ``ReadError``, ``WriteError``, ``ProxyError``, ``TooManyRedirects``): the request may
  have reached the provider: in doubt.
"""

from __future__ import annotations

import sys

from . import Failure, by_status
from ._sends import called, frames_from, only_in

# The frames of a connect error in httpx's own transport, from the redirect loop down.
_FIRST_SEND = [
    [("httpx._client", "_send_handling_redirects"), ("httpx._client", "_send_single_request"),
     ("httpx._transports.default", handle), ("contextlib", "__exit__"),
     ("httpx._transports.default", "map_httpcore_exceptions")]
    for handle in ("handle_request", "handle_async_request")
]  # fmt: skip


def classify(exc: BaseException) -> Failure | None:
    httpx = sys.modules.get("httpx")
    if httpx is None:  # an httpx error cannot exist unless httpx was imported
        return None
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return Failure.NOT_PERFORMED if _first_send(exc) else Failure.IN_DOUBT
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL, httpx.LocalProtocolError)):
        return Failure.REFUSED
    if isinstance(exc, httpx.HTTPStatusError):
        return by_status(exc.response.status_code)
    if isinstance(exc, httpx.HTTPError):
        return Failure.IN_DOUBT
    return None


def _first_send(exc: BaseException) -> bool:
    """It failed in the call's first request, in httpx's own transport: the redirect
    loop had no response before it (its ``history``, which the auth loop's rounds also
    fill, was empty)."""
    frames = frames_from(exc, "httpx")
    if not only_in(frames, "httpx", "contextlib") or called(frames[-5:]) not in _FIRST_SEND:
        return False
    return frames[-5].f_locals.get("history") == []
