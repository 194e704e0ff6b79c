"""The effect every engine test performs: a request to the fake provider
(``tests/support/provider.py``, whose records are the truth), as an oncelog tool with a
probe and as one without.

``$ENGINE_PROVIDER`` is the provider's URL. While the file ``$ENGINE_KILL_ARMED`` exists,
the next request takes it away and asks the provider to SIGKILL the calling process right
after performing the effect, before answering: the window a engine's redelivery re-runs.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import oncelog

PROVIDER = os.environ.get("ENGINE_PROVIDER", "http://127.0.0.1:9")
KILL_ARMED = Path(os.environ.get("ENGINE_KILL_ARMED", "kill-armed"))
ENTERED = Path(os.environ.get("ENGINE_ENTERED", "entered"))


def _disarm() -> bool:
    """True once per arming: whoever removes the file is the call that dies."""
    try:
        KILL_ARMED.unlink()
    except FileNotFoundError:
        return False
    return True


def post_effect(run: str, order: str, seconds: float, key: str) -> Any:
    ENTERED.write_text(str(os.getpid()))
    time.sleep(seconds)  # a slow provider: the call is in flight meanwhile
    body = {"key": key, "run": run, "payload": {"order": order}, "pid": os.getpid(),
            "kill_before_answer": _disarm()}  # fmt: skip
    request = urllib.request.Request(
        PROVIDER + "/effect", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def find_effect(key: str, run: str, order: str, seconds: float) -> oncelog.ProbeAnswer:
    query = urllib.parse.urlencode({"key": key})
    with urllib.request.urlopen(f"{PROVIDER}/effects?{query}", timeout=30) as answer:
        found = json.loads(answer.read())["found"]
    if len(found) == 1:
        return oncelog.Found(found[0])
    return oncelog.NOT_FOUND if not found else oncelog.CANNOT_TELL


@oncelog.tool(kind="create", name="provider.send", probe=find_effect)
def send(run: str, order: str, seconds: float, *, idempotency_key: str) -> Any:
    return post_effect(run, order, seconds, idempotency_key)


@oncelog.tool(kind="create", name="provider.send_unprobed")
def send_unprobed(run: str, order: str, seconds: float, *, idempotency_key: str) -> Any:
    return post_effect(run, order, seconds, idempotency_key)


def perform(run: oncelog.Run, order: str, *, probe: bool, seconds: float = 0.0) -> Any:
    """The one effect of a task, workflow step or activity."""
    tool = send if probe else send_unprobed
    return run.effect("send", tool, run.run_id, order, seconds)
