"""Ready-made probes for providers, one module each, imported by name.

- ``oncelog.probes.stripe``: Stripe PaymentIntents, found by the idempotency key written
  into their metadata (``pip install '.[stripe]'``).
- ``oncelog.probes.mail``: email sent over SMTP, found over IMAP by the key stamped into
  the message (standard library only).

This package imports no provider client itself: ``import oncelog`` works without them,
and a probe module says which extra to install when its client is missing.
"""
