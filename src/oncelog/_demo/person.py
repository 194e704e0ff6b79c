"""What a person does when the run halts for them: look each effect in doubt up at its
service, by its idempotency key, and record what they found."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import oncelog

from . import DemoFailed, records
from .clients import MAIL_DOMAIN

WHO = "demo-operator"


def settle_in_doubt(ledger_url: str, folder: Path, say: Callable[[str], None]) -> None:
    """Emails in doubt are looked up in the mail server's store by their Message-ID,
    which the agent made from the key: found is ``done``, with what the send returns;
    missing is ``not_done``, and the restarted agent sends it."""
    with oncelog.open(ledger_url) as ledger:
        for step in ledger.in_doubt():
            if step.tool != "send_email":
                raise DemoFailed(f"the demo's person does not know how to check {step.tool}")
            message_id = f"<{step.key}@{MAIL_DOMAIN}>"
            found = records.email_with_id(folder, message_id)
            if found is None:
                decision, result = oncelog.Resolution.NOT_DONE, None
                seen = f"no message {message_id} in the mail server's store"
            else:
                decision = oncelog.Resolution.DONE
                result = {"message_id": message_id, "to": found["To"]}
                seen = f"message {message_id} is in the mail server's store"
            ledger.resolve(step.run_id, step.step_id, decision, result=result, by=WHO, note=seen)
            say(f"  a person  {seen}:")
            command = f"oncelog resolve {step.run_id} {step.step_id} {decision.value} --by {WHO}"
            if result is not None:
                command += f" --result '{json.dumps(result, sort_keys=True)}'"
            say(f"            {command}")
