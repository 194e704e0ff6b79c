"""What ``import oncelog`` must not load: an agent that does not post webhooks, run async
code, sign its journal, export metrics or use an integration does not pay for them. Read
from ``sys.modules`` in a fresh interpreter, not timed (docs/benchmarks.md has times)."""

from __future__ import annotations

import json
import subprocess

from .support.launch import python

# Each of these is loaded by the feature that needs it, when it is used.
NOT_AT_IMPORT = (
    "asyncio",  # async runs and async worker handlers
    "urllib.request",  # budget webhooks
    "http.client",
    "email",
    "ssl",
    "socket",
    "secrets",
    "subprocess",
    "tempfile",
    "concurrent.futures",
    "importlib.resources",
    "cryptography",  # signed checkpoints
    "oncelog.audit._signing",
    "oncelog.audit._verify",
    "oncelog.metrics",
    "prometheus_client",
    "oncelog.tracing",
    "opentelemetry",
    "oncelog.integrations",
    "oncelog.queues",
    "oncelog.sinks",
    "oncelog.cli",
    "click",
    "oncelog.console",
    "psycopg",
)


def test_import_oncelog_loads_none_of_the_optional_machinery() -> None:
    script = (
        "import json, sys; before = set(sys.modules); import oncelog; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run(python("-c", script), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "oncelog._ledger" in loaded  # the measurement measures
    heavy = {m for m in loaded if m in NOT_AT_IMPORT or m.split(".")[0] in NOT_AT_IMPORT}
    assert not heavy, f"import oncelog loads {sorted(heavy)}"
