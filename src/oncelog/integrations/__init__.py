"""Guards for the agent frameworks people use: each tool call an oncelog effect, each
model call recorded, with a few lines of change where the agent is built.

    oncelog.integrations.langgraph       pip install 'oncelog[langgraph]'
    oncelog.integrations.openai_agents   pip install 'oncelog[openai-agents]'
    oncelog.integrations.pydantic_ai     pip install 'oncelog[pydantic-ai]'
    oncelog.integrations.mcp_proxy       pip install 'oncelog[mcp]'  (``oncelog mcp-proxy``)

and adapters for the engines that run agents' work, one oncelog run per task, step or
activity:

    oncelog.integrations.celery          pip install 'oncelog[celery]'
    oncelog.integrations.dbos            pip install 'oncelog[dbos]'
    oncelog.integrations.temporal        pip install 'oncelog[temporal]'

Importing this package imports no framework; each module imports its own, and says which
extra to install when it is missing.
"""

from ._common import Policy, current_idempotency_key

__all__ = ["Policy", "current_idempotency_key"]
