"""The agent that ``job.yaml`` runs: it answers one help-desk ticket in three steps.

Its run id is the Job's namespace and name (``$JOB_NAMESPACE/$JOB_NAME``, given by the
downward API), which every pod of the Job shares and no other Job has: a pod that replaces
one that died resumes the same run, and its recorded steps are not done again. The
help desk (``$HELPDESK_URL``) honours an ``Idempotency-Key`` header. It exits through
``run_main``, which drains on SIGTERM: the call in progress finishes and is recorded,
then the run stops before the next step with exit code 75; ``docs/kubernetes.md`` says
how the numbers below and the manifest's fit together.

    JOB_NAMESPACE=support JOB_NAME=ticket-4711 TICKET=4711 \\
        HELPDESK_URL=http://localhost:8080 ONCELOG_URL=ledger.db python agent.py
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import oncelog

# The longest any step may take: every call to the help desk gives up after this many
# seconds. terminationGracePeriodSeconds in job.yaml is sized on it.
STEP_TIMEOUT = 60.0
# How long a replacement pod waits for the lease of a pod that vanished without releasing
# it (SIGKILL at the end of the grace period, a lost node). Renewed every third of it.
LEASE_TTL = 30.0


def helpdesk(method: str, path: str, body: Any = None, key: str | None = None) -> Any:
    request = urllib.request.Request(
        os.environ["HELPDESK_URL"] + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})},
    )
    with urllib.request.urlopen(request, timeout=STEP_TIMEOUT) as response:
        return json.load(response)


@oncelog.tool(kind="create", name="post_reply")
def post_reply(ticket: str, text: str, *, idempotency_key: str) -> Any:
    return helpdesk("POST", f"/tickets/{ticket}/replies", {"text": text}, idempotency_key)


@oncelog.tool(kind="upsert", name="close_ticket")
def close_ticket(ticket: str, *, idempotency_key: str) -> Any:
    return helpdesk("PUT", f"/tickets/{ticket}/status", {"status": "closed"}, idempotency_key)


def run_id() -> str:
    """The Job's, never the pod's: the pod's name changes with every retry."""
    return f"{os.environ['JOB_NAMESPACE']}/{os.environ['JOB_NAME']}"


def answer_ticket() -> None:
    ticket = os.environ["TICKET"]
    with (
        oncelog.open(lease_ttl=LEASE_TTL) as ledger,
        ledger.run(run_id(), plan=["read", "reply", "close"], agent="support") as run,
    ):
        found = run.read("read", helpdesk, "GET", f"/tickets/{ticket}")
        run.effect("reply", post_reply, ticket, f"Dear {found['customer']}, it is refunded.")
        run.effect("close", close_ticket, ticket)


if __name__ == "__main__":
    oncelog.run_main(answer_ticket)
