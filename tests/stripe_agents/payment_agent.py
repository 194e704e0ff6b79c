"""An agent that pays through Stripe (localstripe in the tests), killed and restarted by
``tests/test_stripe_probe.py``.

    python tests/stripe_agents/payment_agent.py --ledger L --run R --stripe URL
        --customer cus_... --card pm_... [--cents 500]

One run, plan ``charge`` then ``receipt``: a ``payment`` tool declared with
``probe=find_payment`` and a 24 h key TTL charges the customer through
``create_payment``; a read step then looks the payment up. It prints the charge's result
as one JSON line and exits through ``oncelog.run_main`` (0 completed, 3 a person must
act). ``ONCELOG_CRASH_AT`` kills it at a named crash point.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import stripe

import oncelog
from oncelog.probes.stripe import create_payment, default_client, find_payment

API_KEY = "sk_test_oncelog"  # localstripe accepts any key that starts with sk_
CURRENCY = "eur"


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="an oncelog agent that charges via Stripe")
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--stripe", required=True, help="API base URL")
    parser.add_argument("--customer", required=True)
    parser.add_argument("--card", required=True, help="a PaymentMethod id")
    parser.add_argument("--cents", type=int, default=500)
    return parser.parse_args(argv)


def configure_stripe(api_base: str) -> None:
    """The global settings ``default_client()`` reads, as an application would set them.
    No network retries: a server that is down should make the probe answer at once."""
    stripe.api_key = API_KEY
    stripe.api_base = api_base
    stripe.max_network_retries = 0


def declare_charge(ledger: oncelog.Ledger) -> oncelog.Tool[..., dict[str, Any]]:
    @ledger.tool(
        kind="payment",
        name="charge",
        probe=find_payment,
        dedupe_window=timedelta(hours=24),
        refusals=(stripe.CardError,),
    )
    def charge(customer: str, cents: int, card: str, *, idempotency_key: str) -> dict[str, Any]:
        return create_payment(
            cents,
            CURRENCY,
            customer,
            idempotency_key=idempotency_key,
            payment_method=card,
            payment_method_types=["card"],
            confirm=True,
        )

    return charge


def payment_status(payment_id: str) -> str:
    return str(default_client().v1.payment_intents.retrieve(payment_id).status)


def agent(args: argparse.Namespace) -> None:
    configure_stripe(args.stripe)
    with oncelog.open(args.ledger) as ledger:
        charge = declare_charge(ledger)
        with ledger.run(args.run, plan=["charge", "receipt"]) as run:
            payment = run.effect("charge", charge, args.customer, args.cents, args.card)
            status = run.read("receipt", payment_status, payment["id"])
    print(json.dumps({"charge": payment, "receipt": status}, sort_keys=True), flush=True)


if __name__ == "__main__":
    arguments = parse()
    oncelog.run_main(lambda: agent(arguments))
