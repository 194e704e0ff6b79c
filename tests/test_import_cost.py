"""What ``import oncelog`` must not load: an agent that does not post webhooks, run async
code, sign its journal, export metrics or use an integration does not pay for them. Read
from ``sys.modules`` in a fresh interpreter, not timed (docs/benchmarks.md has times).

``import oncelog`` itself loads the errors only; the rest of the public names are imported
when first used (PEP 562). So the list is checked twice: after the import, and after an
agent opened a SQLite ledger, ran an effect and replayed it, which is what it pays for.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .support.launch import python

# Each of these is loaded by the feature that needs it, when it is used.
NOT_AT_IMPORT = (
    "asyncio",  # async runs and async worker handlers
    "urllib.request",  # HTTP sinks
    "http.client",  # webhooks
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
    "urllib",  # pathlib imports urllib.parse; a ledger opened by path needs neither
    "pathlib",
    "ipaddress",
    "random",  # the jitter of retry waits
    "logging",  # the library's logger is made when something is first logged (oncelog._log)
)
# An agent that only opened a ledger by path and ran an effect does not need these either.
# The ledger exists, as at every start but the first: creating one logs where it is.
_AGENT = """
import os, sys
before = set(sys.modules)
import oncelog
at_import = set(sys.modules) - before
ledger = oncelog.open(sys.argv[1])
send = ledger.tool(kind="create", name="send")(lambda x, *, idempotency_key: x)
for _ in range(2):  # the second run replays
    with ledger.run("r") as run:
        assert run.effect("s", send, 1) == 1
ledger.close()
print(json.dumps([sorted(at_import), sorted(set(sys.modules) - before)]))
"""


def _heavy(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m in NOT_AT_IMPORT or m.split(".")[0] in NOT_AT_IMPORT}


def _loaded_by_an_agent(folder: Path) -> tuple[set[str], set[str]]:
    """(modules ``import oncelog`` loads, modules an agent's run loads), in a fresh process."""
    path = str(folder / "ledger.db")
    subprocess.run(python("-c", f"import oncelog; oncelog.open({path!r}).close()"), check=True)
    done = subprocess.run(
        python("-c", "import json\n" + _AGENT, path), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    at_import, after_run = json.loads(done.stdout)
    return set(at_import), set(after_run)


def test_import_oncelog_loads_the_errors_only(tmp_path: Path) -> None:
    at_import, _ = _loaded_by_an_agent(tmp_path)
    ours = {m for m in at_import if m.split(".")[0] == "oncelog"}
    errors = {"oncelog._exceptions", "oncelog._exit_codes", "oncelog.records._no_result"}
    assert ours == {"oncelog", "oncelog.records", *errors}
    assert not _heavy(at_import), f"import oncelog loads {sorted(_heavy(at_import))}"


def test_an_agent_s_run_loads_none_of_the_optional_machinery(tmp_path: Path) -> None:
    _, after_run = _loaded_by_an_agent(tmp_path)
    assert "oncelog._ledger" in after_run  # the measurement measures
    assert not _heavy(after_run), f"an agent's run loads {sorted(_heavy(after_run))}"
