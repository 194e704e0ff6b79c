"""Stripe payments that a resumed run can find again.

When the process dies after Stripe took a payment and before oncelog recorded it, the
effect's outcome is unknown. ``create_payment`` makes the PaymentIntent so that it can be
found: the step's idempotency key goes to Stripe as the ``Idempotency-Key`` (Stripe
answers a repeat with the first result for 24 hours, then forgets the key) *and* into
``metadata["oncelog_key"]``, which stays on the PaymentIntent. ``find_payment`` is the
probe that looks for it; ``check_payment`` is the same lookup asked as a preflight,
before each attempt.

A probe that finds no marker can say the payment was not made only if the tool writes the
marker: ``payment_tool`` declares the two as one, ``create_payment`` as the tool and its
finder as the probe, and only that probe answers ``NOT_FOUND``::

    import stripe
    from oncelog.probes.stripe import payment_tool

    stripe.api_key = "sk_live_..."   # or payment_tool(..., finder=PaymentFinder(client))

    charge = payment_tool(name="charge", preflight=True)
    run.effect("charge", charge, 500, "eur", "cus_...", payment_method=card,
               payment_method_types=["card"], confirm=True)

``find_payment`` (or a ``PaymentFinder``) declared beside a tool of your own cannot know
that tool wrote the marker (``stripe.PaymentIntent.create(..., idempotency_key=key)``
writes none): where it finds none it answers ``CANNOT_TELL``, never ``NOT_FOUND``, so a
payment it cannot see is never made again on its word.

What each answer of ``find_payment`` relies on
----------------------------------------------
It pages through the account's PaymentIntents with the List API and keeps those whose
``metadata["oncelog_key"]`` is the key. It never uses the Search API: Stripe documents
that search does not see a new PaymentIntent at once (under a minute normally, longer
during an outage), while the list endpoints read what was written.

``Found(result)``
    Exactly one PaymentIntent carries the key and it was not declined. ``result`` comes
    from ``payment_result``, the function ``create_payment`` returns through, so replay
    and probe hand the agent the same shape; the values are Stripe's as of now (``status``
    may have moved on, from ``processing`` to ``succeeded`` say).
``NOT_FOUND``
    Only from the probe of ``payment_tool``: every page was read, the last one said there
    are no more, and none carried the key. That is definitive because the payment could
    only have been made by ``create_payment`` (it writes the key in the request that
    creates the PaymentIntent, so no PaymentIntent of this step exists without it), in
    the account the client is for, and if nobody removed the metadata since. With
    ``lookback`` only the PaymentIntents created in that window are read: choose it
    longer than the tool's ``dedupe_window`` plus any clock skew, so that a payment too
    old to be seen is also too old for oncelog to retry on NOT_FOUND. A request of the
    killed process that Stripe is still executing may be missed; the retry that follows
    NOT_FOUND carries the same key, so Stripe answers it with that request's result (or
    refuses it while that request runs, and the run halts) instead of paying twice. That
    is why oncelog retries only while the key is valid (``dedupe_window``).
``CANNOT_TELL``
    Stripe could not be asked (network, authentication, rate limit, server error, a
    filter the server refuses); none carries the key and the probe was not declared with
    its tool; the list is longer than ``max_pages`` pages; more than one PaymentIntent
    carries the key (something paid twice: a person must look); or the one found was
    declined, where the call itself would have raised ``stripe.CardError``,
    which no probe answer can say. The run halts for a person; the reason is logged on
    the ``oncelog.probes.stripe`` logger.

The listing costs one request per ``page_size`` PaymentIntents. Without ``lookback`` it
reads the whole account, up to ``max_pages`` pages, and cannot tell beyond that: use
``PaymentFinder(lookback=...)`` on an account with many payments.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from ..display import install_line

try:
    import stripe
except ImportError as exc:  # the extra is optional; say which one to install
    raise ImportError(
        f"oncelog.probes.stripe needs the Stripe client: {install_line('stripe')}"
    ) from exc

from oncelog import (
    CANNOT_TELL,
    NOT_FOUND,
    ConfigurationError,
    Conflict,
    Found,
    PreflightAnswer,
    ProbeAnswer,
    Tool,
    providers,
    tool,
)

if TYPE_CHECKING:
    from stripe.params import PaymentIntentCreateParams, PaymentIntentListParams

__all__ = [
    "METADATA_KEY",
    "PaymentFinder",
    "check_payment",
    "create_payment",
    "default_client",
    "find_payment",
    "payment_result",
    "payment_tool",
]

log = logging.getLogger(__name__)

METADATA_KEY = "oncelog_key"
MAX_PAGE_SIZE = 100  # Stripe's largest list page


def default_client() -> stripe.StripeClient:
    """A client from the stripe package's own settings, read at each call:
    ``stripe.api_key``, ``stripe.api_base`` and ``stripe.max_network_retries``."""
    if not stripe.api_key:
        raise ConfigurationError(
            "no Stripe API key: set stripe.api_key, or pass client=stripe.StripeClient(...)"
        )
    return _client_for(stripe.api_key, stripe.api_base, stripe.max_network_retries)


@functools.lru_cache(maxsize=4)
def _client_for(api_key: str, api_base: str, max_network_retries: int) -> stripe.StripeClient:
    # One client per setting, so its HTTP connections are reused across calls.
    return stripe.StripeClient(
        api_key, base_addresses={"api": api_base}, max_network_retries=max_network_retries
    )


def create_payment(
    amount: int,
    currency: str,
    customer: str | None = None,
    *,
    idempotency_key: str,
    client: stripe.StripeClient | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Create a PaymentIntent that ``find_payment`` can find by ``idempotency_key``.

    The key is sent as Stripe's ``Idempotency-Key`` and written into
    ``metadata["oncelog_key"]``; other ``params`` (``payment_method``, ``confirm``,
    ``payment_method_types``, ``metadata``, ...) go to ``PaymentIntents.create`` as given.
    Stripe's errors propagate: a decline raises ``stripe.CardError`` (declare it in the
    tool's ``refusals``). Returns ``payment_result`` of the PaymentIntent.
    """
    metadata = dict(params.pop("metadata", None) or {})
    if metadata.setdefault(METADATA_KEY, idempotency_key) != idempotency_key:
        raise ConfigurationError(
            f"metadata[{METADATA_KEY!r}] is oncelog's; it holds the idempotency key "
            f"{idempotency_key!r}, not {metadata[METADATA_KEY]!r}"
        )
    fields: dict[str, Any] = {"amount": amount, "currency": currency, "metadata": metadata}
    if customer is not None:
        fields["customer"] = customer
    intent = (client or default_client()).v1.payment_intents.create(
        params=cast("PaymentIntentCreateParams", {**fields, **params}),
        options={"idempotency_key": idempotency_key},
    )
    return payment_result(intent)


def payment_result(intent: stripe.PaymentIntent) -> dict[str, Any]:
    """What the agent sees of a payment, live or found by the probe: the fields that
    identify it and say where it stands. Not the whole PaymentIntent: its
    ``client_secret`` lets a browser confirm the payment and has no place in a ledger,
    and most other fields only describe how it was made."""
    metadata = intent.metadata.to_dict() if intent.metadata is not None else {}
    return {
        "id": intent.id,
        "object": "payment_intent",
        "amount": intent.amount,
        "currency": intent.currency,
        "customer": _id_of(intent.customer),
        "status": intent.status,
        "latest_charge": _id_of(intent.latest_charge),
        "created": intent.created,
        "livemode": intent.livemode,
        "metadata": {str(name): str(value) for name, value in metadata.items()},
    }


def _id_of(field: str | stripe.StripeObject | None) -> str | None:
    """An expandable field's id, whether Stripe sent the id or the expanded object."""
    if field is None or isinstance(field, str):
        return field
    return str(field["id"])


def _declined(intent: stripe.PaymentIntent) -> bool:
    """Its last attempt failed: the create call raised rather than returned."""
    return intent.status == "requires_payment_method" and intent.last_payment_error is not None


class _CannotTell(Exception):
    """Why the list of PaymentIntents cannot be read to its end."""


@dataclass(frozen=True)
class PaymentFinder:
    """A probe for payments made by ``create_payment``; ``find_payment`` is one with the
    defaults. ``client``: ``default_client()`` when None. ``lookback``: read only the
    PaymentIntents created in that window (Stripe's ``created[gte]``; see the module's
    docstring for how long it must be). ``page_size`` and ``max_pages`` bound the work:
    a longer list cannot tell. ``sees_its_tool`` is set by ``payment_tool`` only: it
    promises that every payment of the probed tool is made by ``create_payment``, and
    lets a search that finds nothing answer ``NOT_FOUND``."""

    client: stripe.StripeClient | None = None
    lookback: timedelta | None = None
    page_size: int = MAX_PAGE_SIZE
    max_pages: int = 50
    sees_its_tool: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ConfigurationError(f"page_size must be 1..{MAX_PAGE_SIZE}, not {self.page_size}")
        if self.max_pages < 1:
            raise ConfigurationError(f"max_pages must be at least 1, not {self.max_pages}")
        if self.lookback is not None and self.lookback <= timedelta(0):
            raise ConfigurationError(f"lookback must be positive, not {self.lookback}")

    def __call__(self, key: str, *args: Any, **kwargs: Any) -> ProbeAnswer:
        """The answer for the payment made with ``key``. The tool's arguments are
        accepted as the probe contract passes them, and not needed: the key names it."""
        client = self.client or default_client()
        try:
            matches = self._carrying(key, client)
        except (stripe.StripeError, _CannotTell) as exc:
            return _cannot_tell(key, f"{type(exc).__name__}: {exc}")
        if not matches and not self.sees_its_tool:
            return _cannot_tell(key, "no PaymentIntent carries it, and a probe declared apart "
                                "from its tool cannot know the tool marks its payments: "
                                "declare both with oncelog.probes.stripe.payment_tool")  # fmt: skip
        if not matches:
            return NOT_FOUND
        if len(matches) > 1:
            ids = ", ".join(intent.id for intent in matches)
            return _cannot_tell(key, f"{len(matches)} PaymentIntents carry it: {ids}")
        (intent,) = matches
        if _declined(intent):
            return _cannot_tell(key, f"PaymentIntent {intent.id} was declined")
        return Found(payment_result(intent))

    def preflight(self, key: str, *args: Any, **kwargs: Any) -> PreflightAnswer:
        """The same lookup before an attempt (a tool's ``preflight=``): one PaymentIntent
        with the key, not declined: ``Found``, the tool is not called; none, or one that
        was declined (the call with this key gets Stripe's decline again, or, once Stripe
        forgot the key, tries the card anew): ``NOT_FOUND``, the tool is called; several:
        ``Conflict`` naming them, a person decides; Stripe out of reach: ``CANNOT_TELL``,
        nothing is sent now. Its ``NOT_FOUND`` needs no pairing with the tool: it lets
        oncelog call the tool only where it would without a preflight."""
        client = self.client or default_client()
        try:
            matches = self._carrying(key, client)
        except (stripe.StripeError, _CannotTell) as exc:
            return _cannot_tell(key, f"{type(exc).__name__}: {exc}")
        if len(matches) > 1:
            ids = ", ".join(intent.id for intent in matches)
            return Conflict(f"{len(matches)} PaymentIntents carry the key {key}: {ids}")
        if not matches or _declined(matches[0]):
            return NOT_FOUND
        return Found(payment_result(matches[0]))

    def _carrying(self, key: str, client: stripe.StripeClient) -> list[stripe.PaymentIntent]:
        """Every PaymentIntent in the window whose metadata holds ``key``, from a list
        read to its end."""
        params: dict[str, Any] = {"limit": self.page_size}
        if self.lookback is not None:
            params["created"] = {"gte": int(time.time() - self.lookback.total_seconds())}
        matches: list[stripe.PaymentIntent] = []
        for _ in range(self.max_pages):
            page = client.v1.payment_intents.list(params=cast("PaymentIntentListParams", params))
            matches += [intent for intent in page.data if _key_of(intent) == key]
            if not page.has_more:
                return matches
            if not page.data:  # "more" with nothing to continue after: not a list to trust
                raise _CannotTell("Stripe said there are more PaymentIntents but sent none")
            params["starting_after"] = page.data[-1].id
        raise _CannotTell(f"more than {self.max_pages} pages of {self.page_size} PaymentIntents")


def _key_of(intent: stripe.PaymentIntent) -> str | None:
    metadata = intent.metadata
    if metadata is None or METADATA_KEY not in metadata:
        return None
    return str(metadata[METADATA_KEY])


def _cannot_tell(key: str, reason: str) -> ProbeAnswer:
    log.warning("cannot tell whether the payment with key %s was made: %s", key, reason)
    return CANNOT_TELL


_FIND_PAYMENT = PaymentFinder()


def payment_tool(
    *, name: str, finder: PaymentFinder = _FIND_PAYMENT, preflight: bool = False, **options: Any
) -> Tool[..., dict[str, Any]]:
    """``create_payment`` declared as a ``payment`` tool named ``name`` with the probe
    that sees what it makes: ``finder`` (its client makes the payments too), answering
    ``NOT_FOUND`` where no PaymentIntent carries the key; with ``preflight`` the same
    lookup is also asked before each attempt. It is declared with
    ``provider=oncelog.providers.stripe``, the one source of Stripe's published key window
    (``dedupe_window``: a shorter one in ``options`` wins, a longer one is refused) and of
    its answers to a repeated key, and with ``refusals=(stripe.CardError,)`` unless
    ``options`` say otherwise; other ``options`` (``failures``, ``retry``, ``cost``, ...)
    go to ``oncelog.tool``. The tool is called as ``create_payment`` is, without the key:
    ``run.effect(step, charge, amount, currency, customer, **params)``."""
    probe = replace(finder, sees_its_tool=True)
    options.setdefault("refusals", (stripe.CardError,))

    def create(
        amount: int,
        currency: str,
        customer: str | None = None,
        *,
        idempotency_key: str,
        **params: Any,
    ) -> dict[str, Any]:
        return create_payment(
            amount, currency, customer, idempotency_key=idempotency_key, client=probe.client,
            **params,
        )  # fmt: skip

    declare = tool(
        kind="payment", name=name, provider=providers.stripe, probe=probe,
        preflight=probe.preflight if preflight else None, **options,
    )  # fmt: skip
    return declare(create)


def find_payment(key: str, *args: Any, **kwargs: Any) -> ProbeAnswer:
    """A probe for a payment made by ``create_payment`` with ``idempotency_key=key``,
    using ``default_client()``. Declared beside a tool of your own it answers ``Found`` or
    ``CANNOT_TELL``, never ``NOT_FOUND``: ``payment_tool`` declares the tool with the
    probe that may; see the module's docstring for what each answer means."""
    return _FIND_PAYMENT(key, *args, **kwargs)


def check_payment(key: str, *args: Any, **kwargs: Any) -> PreflightAnswer:
    """The preflight for a payment made by ``create_payment``: ``find_payment``'s lookup,
    asked before each attempt; see ``PaymentFinder.preflight``."""
    return _FIND_PAYMENT.preflight(key, *args, **kwargs)
