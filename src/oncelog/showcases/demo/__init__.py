"""``oncelog demo``: the incident the project exists to prevent, reproduced and fixed.

``support_agent`` is the agent (with ``clients`` and ``model``); ``tickets`` is the demo's
ticket service; ``services`` starts it with localstripe and an SMTP server;
``supervisor`` restarts the agent as Kubernetes would; ``person`` decides what a halted
run leaves in doubt; ``records``, ``timeline`` and ``runner`` tell what happened.
"""

import shlex
import shutil
import sys
from pathlib import Path

from oncelog import OnceLogError


def oncelog_here() -> str:
    """The ``oncelog`` command as the shell that started the demo runs it: ``oncelog``
    when that is on its PATH, else the path of the one running (the README's first line
    runs ``.venv/bin/oncelog`` with no virtualenv activated), else ``python -m oncelog``."""
    script = Path(sys.executable).parent / "oncelog"
    found = shutil.which("oncelog")
    if found is not None and (not script.exists() or Path(found).resolve() == script.resolve()):
        return "oncelog"
    if script.exists():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m oncelog"


class DemoFailed(OnceLogError):
    """The demo could not run to its end (a service or the agent failed), or oncelog let
    an effect happen twice. The message says where to look."""
