"""``oncelog demo``: the incident the project exists to prevent, reproduced and fixed.

``support_agent`` is the agent (with ``clients`` and ``model``); ``tickets`` is the demo's
ticket service; ``services`` starts it with localstripe and an SMTP server;
``supervisor`` restarts the agent as Kubernetes would; ``person`` decides what a halted
run leaves in doubt; ``records``, ``timeline`` and ``runner`` tell what happened.
"""

from oncelog import OnceLogError


class DemoFailed(OnceLogError):
    """The demo could not run to its end (a service or the agent failed), or oncelog let
    an effect happen twice. The message says where to look."""
