"""Failures of the ``httpx`` client (imported only if the program already did).

- ``ConnectError`` (refused, DNS failure, TLS handshake), ``ConnectTimeout`` and
  ``PoolTimeout``: no connection carried the request: not performed.
- ``UnsupportedProtocol``, ``InvalidURL``, ``LocalProtocolError``: never sent, and never
  will be: refused.
- ``HTTPStatusError`` (from ``raise_for_status``): by status, see ``by_status``.
- anything else (``ReadTimeout``, ``WriteTimeout``, ``RemoteProtocolError``,
  ``ReadError``, ``WriteError``): the request may have reached the provider: in doubt.
"""

from __future__ import annotations

import sys

from . import Failure, by_status


def classify(exc: BaseException) -> Failure | None:
    httpx = sys.modules.get("httpx")
    if httpx is None:  # an httpx error cannot exist unless httpx was imported
        return None
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return Failure.NOT_PERFORMED
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL, httpx.LocalProtocolError)):
        return Failure.REFUSED
    if isinstance(exc, httpx.HTTPStatusError):
        return by_status(exc.response.status_code)
    if isinstance(exc, httpx.HTTPError):
        return Failure.IN_DOUBT
    return None
