"""Guards for the agent frameworks people use: each tool call an oncelog effect, each
model call recorded, with a few lines of change where the agent is built.

    oncelog.integrations.langgraph       pip install '.[langgraph]'
    oncelog.integrations.openai_agents   pip install '.[openai-agents]'
    oncelog.integrations.pydantic_ai     pip install '.[pydantic-ai]'
    oncelog.integrations.crewai          pip install '.[crewai]'
    oncelog.integrations.google_adk      pip install '.[google-adk]'
    oncelog.integrations.mcp_proxy       pip install '.[mcp]'  (``oncelog mcp-proxy``)

and adapters for the engines that run agents' work, one oncelog run per task, step or
activity:

    oncelog.integrations.celery          pip install '.[celery]'
    oncelog.integrations.dbos            pip install '.[dbos]'
    oncelog.integrations.temporal        pip install '.[temporal]'

Importing this package imports no framework; each module imports its own, and says which
extra to install when it is missing.
"""

from ._common import Policy, current_idempotency_key

__all__ = ["Policy", "current_idempotency_key"]
