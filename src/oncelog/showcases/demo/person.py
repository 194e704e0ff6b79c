"""What a person does when the run halts for them: look each effect in doubt up at its
service, by its idempotency key, and record what they found."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import oncelog
from oncelog.probes.mail import message_id_for

from . import DemoFailed, oncelog_here, records
from .clients import MAIL_DOMAIN

WHO = "demo-operator"


def settle_in_doubt(
    ledger_url: str, folder: Path, say: Callable[[str], None], typed: list[str]
) -> None:
    """Emails in doubt are looked up in the mail server's store by their Message-ID,
    which the agent's sender made from the key: found is ``done``, with what the send returns;
    missing is ``not_done``, and the restarted agent sends it. The demo plays the operator
    through the library; ``typed`` gets the commands a real one would have typed."""
    db, here = shlex.quote(ledger_url), oncelog_here()
    with oncelog.open(ledger_url) as ledger:
        in_doubt = ledger.in_doubt()
        typed += [f"{here} unknown --db {db}"]
        for step in in_doubt:
            if step.tool != "send_email":
                raise DemoFailed(f"the demo's person does not know how to check {step.tool}")
            message_id = message_id_for(step.key, MAIL_DOMAIN, ledger.stamp_key())
            found = records.email_with_id(folder, message_id)
            if found is None:
                decision, result = oncelog.Resolution.NOT_DONE, None
                seen = f"no message {message_id} in the mail server's store"
            else:
                decision = oncelog.Resolution.DONE
                result = {"message_id": message_id, "to": [found["To"]]}
                seen = f"message {message_id} is in the mail server's store"
            ledger.resolve(
                step.run_id, step.step_id, decision, result=result, by=WHO, note=seen,
                attempt=step.attempts,
            )  # fmt: skip
            say(f"  operator  (the demo plays the operator here) {seen}, so it resolves:")
            command = f"{here} resolve {step.run_id} {step.step_id} {decision.value} --by {WHO}"
            if result is not None:
                command += f" --result {shlex.quote(json.dumps(result, sort_keys=True))}"
            command += f" --note {shlex.quote(seen)} --attempt {step.attempts} --db {db}"
            say(f"            {command}")
            typed += [f"{here} show {step.run_id} --db {db}", command]
