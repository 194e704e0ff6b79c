"""The support agent's model calls, simulated so that the demo runs offline.

Each answer is a function of the prompt alone, so every process makes the same decisions,
and carries the ``usage`` a chat completion reports (oncelog records it: a resumed run
spends no tokens on the calls it replays). A real agent would call its model here.
"""

from __future__ import annotations

import json
from typing import Any

RENEWAL_CENTS = 4900


def _answer(prompt: dict[str, Any], **fields: Any) -> dict[str, Any]:
    prompt_tokens = len(json.dumps(prompt, sort_keys=True)) // 4 + 200  # + the system prompt
    completion_tokens = len(json.dumps(fields, sort_keys=True)) // 4
    return {
        **fields,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def classify(message: str) -> dict[str, Any]:
    return _answer({"message": message}, intent="failed_renewal", wants="retry the payment")


def decide(triage: dict[str, Any], charges: list[Any], tickets: list[Any]) -> dict[str, Any]:
    prompt = {"triage": triage, "charges": charges, "tickets": tickets}
    return _answer(
        prompt,
        subject="Renewal payment failed; customer asks to retry",
        body="The yearly renewal did not go through. The customer has updated the card.",
    )


def confirm_charge(customer: dict[str, Any], card: str) -> dict[str, Any]:
    return _answer({"customer": customer, "card": card}, cents=RENEWAL_CENTS)


def draft_email(customer: dict[str, Any], payment: dict[str, Any], status: str) -> dict[str, Any]:
    if status != "succeeded":
        return _answer(
            {"customer": customer, "payment": payment, "status": status},
            subject="About your renewal",
            body=f"Hello {customer['name']},\n\nyour payment is {status}; we will write again.",
        )
    euros = payment["amount"] / 100
    return _answer(
        {"customer": customer, "payment": payment, "status": status},
        subject="Your renewal is paid",
        body=(
            f"Hello {customer['name']},\n\nwe have charged {euros:.2f} EUR to your card "
            f"(payment {payment['id']}); your subscription runs for another year.\n\n"
            "Your support team"
        ),
    )


def summarize(
    ticket: dict[str, Any], payment: dict[str, Any], email: dict[str, Any]
) -> dict[str, Any]:
    prompt = {"ticket": ticket["id"], "payment": payment["id"], "email": email}
    return _answer(
        prompt, note=f"Charged {payment['id']}, confirmed by email {email['message_id']}."
    )


def check_resolution(ticket: dict[str, Any]) -> dict[str, Any]:
    return _answer({"ticket": ticket}, resolved=ticket["payment"] is not None)


def wrap_up(ticket: dict[str, Any]) -> dict[str, Any]:
    return _answer({"ticket": ticket}, summary=f"Ticket {ticket['id']} solved: renewal paid.")
