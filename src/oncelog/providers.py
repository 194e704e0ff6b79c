"""``oncelog.providers``: what providers document about their idempotency keys, declared
once, given to a tool::

    from oncelog import providers

    @ledger.tool(kind="payment", provider=providers.stripe)
    def charge(amount: int, *, idempotency_key: str) -> dict: ...

The tool takes the provider's published dedupe window (an effect in doubt younger than it
is sent again with the same key), its classifier of the answers to a repeated key (one
still in progress: stop and send again later; one with other parameters: a person
decides, never a resend) and, where oncelog ships one, its probe. What the tool declares
itself wins, except a ``dedupe_window`` longer than the provider publishes, which is
refused. A provider that publishes no window gives none. docs/providers.md lists each
figure with its source.
"""

from __future__ import annotations

from .failures.keys import KeyAnswer
from .runtime._provider_list import KNOWN, adyen, checkout, nylas, paypal, resend, square, stripe
from .runtime._providers import Provider

__all__ = [
    "KNOWN", "KeyAnswer", "Provider", "adyen", "checkout", "nylas", "paypal", "resend",
    "square", "stripe",
]  # fmt: skip
