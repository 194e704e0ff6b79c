"""``oncelog crashtest -- COMMAND``: prove an agent safe before deploying it.

A run without crashes learns the effects the agent makes. Then, for each of the five crash
points of each effect, a trial with a run id and a ledger of its own kills the agent's
first process there with SIGKILL (``ONCELOG_CRASH_AT``) and restarts it without the crash
point, as a supervisor would, until it completes, halts for a person or waits. The
verdicts are read from each trial's ledger: an effect attempted again while it might
already have happened, a run the restarts never resumed (a run id made at process start),
and step ids that changed between attempts.
"""

from .agent import Agent
from .errors import NotTestable
from .report import Report, Table, summary
from .trials import Settings, Trials, boundaries

__all__ = [
    "Agent",
    "NotTestable",
    "Report",
    "Settings",
    "Table",
    "Trials",
    "boundaries",
    "summary",
]
