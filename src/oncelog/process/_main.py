"""Whether this process runs its agent under ``run_main``, which sets it: a run started
then logs which ledger it uses. Apart from ``_process`` so that a run need not import it
(nor the ``logging`` it imports)."""

from __future__ import annotations

RUNNING = [False]
