"""What each provider documents about its idempotency keys, with where it says so.

A figure that is not published is None, never a guess: a window oncelog trusts is one
inside which it sends an effect in doubt again. docs/providers.md shows the same table;
``tests/test_providers.py`` keeps the two in step.
"""

from __future__ import annotations

from datetime import timedelta

from ..failures import stripe as stripe_failures
from ..failures.keys import KeyAnswer
from ._providers import Provider, importing

stripe = Provider(
    name="Stripe",
    key_field="Idempotency-Key",
    # "You can remove keys ... after they're at least 24 hours old": kept at least that.
    dedupe_window=timedelta(hours=24),
    in_progress=KeyAnswer(409, "idempotency_key_in_use"),
    mismatch=KeyAnswer(400, "idempotency_error"),
    sources=(
        "https://docs.stripe.com/idempotency",
        "https://docs.stripe.com/api/idempotent_requests",
        "https://docs.stripe.com/error-codes#idempotency-key-in-use",
    ),
    failures=stripe_failures.classify,
    probe=importing("oncelog.probes.stripe", "find_payment"),
)

adyen = Provider(
    name="Adyen",
    key_field="Idempotency-Key",
    dedupe_window=timedelta(days=31),  # "valid for a minimum period of 31 days"
    in_progress=None,
    mismatch=None,
    sources=("https://docs.adyen.com/development-resources/api-idempotency",),
    notes="keys are per company account, and not checked across regional endpoints",
)

resend = Provider(
    name="Resend",
    key_field="Idempotency-Key",  # over SMTP: the Resend-Idempotency-Key header
    dedupe_window=timedelta(hours=24),
    in_progress=KeyAnswer(409, "concurrent_idempotent_requests"),
    mismatch=KeyAnswer(409, "invalid_idempotent_request"),
    sources=("https://resend.com/docs/dashboard/emails/idempotency-keys",),
)

nylas = Provider(
    name="Nylas",
    key_field="Idempotency-Key",
    dedupe_window=timedelta(hours=1),
    in_progress=KeyAnswer(409, "api.concurrent_idempotent_request"),
    mismatch=KeyAnswer(409, "api.invalid_idempotent_request"),
    sources=(
        "https://developer.nylas.com/docs/v3/email/idempotent-send/",
        "https://developer.nylas.com/docs/changelogs/2026-04-28-idempotent-send/",
    ),
    notes="send endpoints only; per grant, or per application for transactional send",
)

checkout = Provider(
    name="Checkout.com",
    key_field="Cko-Idempotency-Key",
    # The default; an account manager can change it for a production account, so
    # declare a shorter dedupe_window if yours was shortened.
    dedupe_window=timedelta(hours=24),
    in_progress=None,
    mismatch=None,
    sources=("https://www.checkout.com/docs/payments/manage-payments/idempotency",),
    notes="only a 2xx answer is kept: a failed first request is processed again",
)

paypal = Provider(
    name="PayPal",
    key_field="PayPal-Request-Id",
    dedupe_window=None,  # "how long the server stores the ID": per API, in its reference
    in_progress=None,  # "might fail the second request", with no code given
    mismatch=None,
    sources=("https://developer.paypal.com/api/rest/reference/idempotency/",),
    notes="not every API takes the header",
)

square = Provider(
    name="Square",
    key_field="idempotency_key",  # a field of the request body
    dedupe_window=None,  # "We do not publish a retention period" (Square's forum)
    in_progress=None,
    mismatch=None,  # "an error indicating that you used the idempotency key previously"
    sources=(
        "https://developer.squareup.com/docs/working-with-apis/idempotency",
        "https://developer.squareup.com/forums/t/how-long-are-idempotency-keys-retained-for-the-createpayment-endpoint/28303",
    ),
)

KNOWN: tuple[Provider, ...] = (stripe, adyen, resend, nylas, checkout, paypal, square)
