"""One attempt of a Temporal activity whose effect goes through oncelog, run by the SDK's
``ActivityEnvironment`` (no Temporal server) in a process of its own, as a worker would.

    python -m tests.engine_agents.temporal_activity WORKFLOW_ID ACTIVITY_ID ATTEMPT ORDER \
        probe|unprobed [RUN_NAME]

Prints ``RESULT <json>``, or ``ERROR <type> non_retryable=<bool> <message>`` and exits 1;
the ledger is ``$ONCELOG_URL``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import oncelog
from oncelog.integrations import temporal as oncelog_temporal

from . import provider_tool


@functools.cache
def ledger() -> oncelog.Ledger:
    """Opened on first use: the tests import this module for ``attempt`` alone."""
    return oncelog.open()


@activity.defn
def send_order(order: str, probe: bool, name: str | None = None) -> Any:
    with oncelog_temporal.run(ledger(), name=name) as run:
        return provider_tool.perform(run, order, probe=probe)


def attempt(workflow_id: str, activity_id: str, number: int) -> ActivityEnvironment:
    """An environment whose activity info is that of one attempt of one activity."""
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(
        environment.info, workflow_id=workflow_id, activity_id=activity_id, attempt=number
    )
    return environment


def main(
    workflow_id: str, activity_id: str, number: str, order: str, probe: str, *name: str
) -> int:
    environment = attempt(workflow_id, activity_id, int(number))
    try:
        result = environment.run(send_order, order, probe == "probe", *name)
    except ApplicationError as exc:
        print("ERROR", exc.type, f"non_retryable={exc.non_retryable}", exc.message, flush=True)
        return 1
    print("RESULT", json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
