"""A DBOS application whose workflow's one step performs an oncelog effect.

    python -m tests.engine_agents.dbos_app SYSTEM_DB_URL start WORKFLOW_ID ORDER probe|unprobed
    python -m tests.engine_agents.dbos_app SYSTEM_DB_URL start-direct WORKFLOW_ID ORDER probe
    python -m tests.engine_agents.dbos_app SYSTEM_DB_URL recover WORKFLOW_ID
    python -m tests.engine_agents.dbos_app SYSTEM_DB_URL restart WORKFLOW_ID ORDER probe|unprobed

``start`` runs the workflow under that id (``start-direct``: the workflow whose own code
performs the effect, outside any step); ``restart`` deletes the workflow first (as
after a person resolved what stopped it) and runs it again under the same id;
``recover`` only launches DBOS, whose recovery takes up the workflows a dead process left
pending, and waits for the workflow's end.
Either prints ``RESULT <json>`` or ``ERROR <type> <message>`` (exit 3); the ledger is
``$ONCELOG_URL``; DBOS's own tables are in the schema ``$DBOS_SCHEMA`` (default ``dbos``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

import oncelog
from oncelog.integrations import dbos as oncelog_dbos

from . import provider_tool

ledger = oncelog.open()


@DBOS.step(retries_allowed=True, max_attempts=3, should_retry=oncelog_dbos.should_retry)
def send_step(order: str, probe: bool) -> Any:
    with oncelog_dbos.run(ledger) as run:
        return provider_tool.perform(run, order, probe=probe)


@DBOS.workflow()
def order_workflow(order: str, probe: bool) -> Any:
    return {"sent": send_step(order, probe), "run": oncelog_dbos.run_id()}


@DBOS.workflow()
def direct_workflow(order: str, probe: bool) -> Any:
    """The effect in the workflow's own code: DBOS re-executes it from the top, and the
    run, named by the workflow id, replays it."""
    with oncelog_dbos.run(ledger) as run:
        return {"sent": provider_tool.perform(run, order, probe=probe), "run": run.run_id}


def main(url: str, action: str, workflow_id: str, *rest: str) -> int:
    schema = os.environ.get("DBOS_SCHEMA", "dbos")
    config: DBOSConfig = {"name": "oncelog-tests", "system_database_url": url,
                          "dbos_system_schema": schema, "log_level": "WARNING"}  # fmt: skip
    DBOS(config=config)
    DBOS.launch()
    try:
        if action == "restart":
            DBOS.delete_workflow(workflow_id)
        if action in ("start", "restart", "start-direct"):
            workflow = direct_workflow if action == "start-direct" else order_workflow
            with SetWorkflowID(workflow_id):
                handle = DBOS.start_workflow(workflow, rest[0], rest[1] == "probe")
        else:
            handle = DBOS.retrieve_workflow(workflow_id)
        result = handle.get_result()
    except oncelog.OnceLogError as exc:
        print("ERROR", type(exc).__name__, exc, flush=True)
        return oncelog.exit_code_for(exc)
    finally:
        DBOS.destroy()
    print("RESULT", json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
