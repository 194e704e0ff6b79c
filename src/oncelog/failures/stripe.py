"""Failures of the ``stripe`` client (imported only if the program already did).

Stripe saves the answer of the first request with an idempotency key once the endpoint
began executing, and answers repeats with it (for about 24 hours): so with a key, what
is in doubt can be sent again (``dedupe_window=timedelta(hours=24)``).

- ``CardError`` (402: the card was declined, Stripe documents that no charge was made),
  ``InvalidRequestError`` (400/404: the parameters were refused before executing),
  ``AuthenticationError``, ``PermissionError``: refused.
- ``RateLimitError`` (429: not processed): not performed.
- any error with code ``idempotency_key_in_use`` (409: a request with this key is still
  being processed): in progress; an ``IdempotencyError`` (400 ``idempotency_error``: the
  key was used with other parameters): key mismatch, a person decides (a resend with the
  key gets the same answer, and a new key could pay twice).
- ``APIConnectionError`` (the network failed somewhere between sending and the answer),
  ``APIError`` (5xx) and anything else from Stripe: in doubt.
"""

from __future__ import annotations

import sys

from . import Failure


def classify(exc: BaseException) -> Failure | None:
    stripe = sys.modules.get("stripe")
    if stripe is None:  # a Stripe error cannot exist unless stripe was imported
        return None
    if not isinstance(exc, stripe.StripeError):
        return None
    if getattr(exc, "code", None) == "idempotency_key_in_use":
        return Failure.IN_PROGRESS  # whatever class the client raised it as
    if isinstance(exc, stripe.IdempotencyError):
        return Failure.KEY_MISMATCH
    refused = (stripe.CardError, stripe.InvalidRequestError, stripe.AuthenticationError,
               stripe.PermissionError)  # fmt: skip
    if isinstance(exc, refused):
        return Failure.REFUSED
    if isinstance(exc, stripe.RateLimitError):
        return Failure.NOT_PERFORMED
    return Failure.IN_DOUBT
