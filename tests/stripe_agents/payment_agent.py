"""An agent that pays through Stripe (localstripe in the tests), killed and restarted by
``tests/test_stripe_probe.py``.

    python tests/stripe_agents/payment_agent.py --ledger L --run R --stripe URL
        --customer cus_... --card pm_... [--cents 500] [--direct]

One run, plan ``charge`` then ``receipt``: the ``payment`` tool ``payment_tool`` declares
(``create_payment`` with its probe and Stripe's 24 h key window) charges the customer; a
read step then looks the payment up. It prints the charge's result
as one JSON line and exits through ``oncelog.run_main`` (0 completed, 3 a person must
act). ``ONCELOG_CRASH_AT`` kills it at a named crash point. ``--direct`` makes the tool
create the PaymentIntent itself (``stripe.PaymentIntent.create(..., idempotency_key=key)``,
no marker in its metadata) beside ``find_payment``, with no key window: the probe decides
alone, and this is the pairing it must not trust.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import stripe

import oncelog
from oncelog.probes.stripe import default_client, find_payment, payment_tool

API_KEY = "sk_test_oncelog"  # localstripe accepts any key that starts with sk_
CURRENCY = "eur"
PLAN = ["charge", "receipt"]


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="an oncelog agent that charges via Stripe")
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--stripe", required=True, help="API base URL")
    parser.add_argument("--customer", required=True)
    parser.add_argument("--card", required=True, help="a PaymentMethod id")
    parser.add_argument("--cents", type=int, default=500)
    parser.add_argument("--direct", action="store_true", help="a tool the probe cannot see")
    return parser.parse_args(argv)


def configure_stripe(api_base: str) -> None:
    """The global settings ``default_client()`` reads, as an application would set them.
    No network retries: a server that is down should make the probe answer at once."""
    stripe.api_key = API_KEY
    stripe.api_base = api_base
    stripe.max_network_retries = 0


def declare_direct_charge(ledger: oncelog.Ledger) -> oncelog.Tool[..., dict[str, Any]]:
    @ledger.tool(kind="payment", name="charge", probe=find_payment, refusals=(stripe.CardError,))
    def charge(customer: str, cents: int, card: str, *, idempotency_key: str) -> dict[str, Any]:
        intent = stripe.PaymentIntent.create(
            amount=cents,
            currency=CURRENCY,
            customer=customer,
            payment_method=card,
            confirm=True,
            idempotency_key=idempotency_key,
        )
        return {"id": intent.id, "status": intent.status}

    return charge


def payment_status(payment_id: str) -> str:
    return str(default_client().v1.payment_intents.retrieve(payment_id).status)


def agent(args: argparse.Namespace) -> None:
    configure_stripe(args.stripe)
    with oncelog.open(args.ledger) as ledger, ledger.run(args.run, plan=PLAN) as run:
        if args.direct:
            charge = declare_direct_charge(ledger)
            payment = run.effect("charge", charge, args.customer, args.cents, args.card)
        else:
            payment = run.effect(
                "charge", payment_tool(name="charge"), args.cents, CURRENCY, args.customer,
                payment_method=args.card, payment_method_types=["card"], confirm=True,
            )  # fmt: skip
        status = run.read("receipt", payment_status, payment["id"])
    print(json.dumps({"charge": payment, "receipt": status}, sort_keys=True), flush=True)


if __name__ == "__main__":
    arguments = parse()
    oncelog.run_main(lambda: agent(arguments))
