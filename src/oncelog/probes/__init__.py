"""Ready-made probes for providers, one module each, imported by name.

- ``oncelog.probes.stripe``: Stripe PaymentIntents, found by the idempotency key written
  into their metadata (``pip install '.[stripe]'``).

This package imports no provider client itself: ``import oncelog`` works without them,
and a probe module says which extra to install when its client is missing.
"""
