"""Why crashtest could not test an agent at all (as opposed to what it found)."""

from __future__ import annotations

from oncelog import UsageError


class NotTestable(UsageError):
    """The command cannot be started, fails or hangs without any crash, or records no
    effect in the ledger crashtest gives it: there is nothing to kill it at."""
