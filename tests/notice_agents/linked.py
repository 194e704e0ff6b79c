"""An agent for the notice-to-decision tests: one ``create`` effect (an email) sent to the
provider process, which performs it and, when told to, SIGKILLs this agent before it
answers: the email went out, and the ledger has its intent only. Started again with a
wait, the run halts on the email in doubt, the notice goes to HOOK in SHAPE (``slack``,
``telegram``, or ``plain``: the ledger's own webhook), and the agent waits in place for
the decision. The console's address for the notice's links is ``$ONCELOG_CONSOLE_URL``.

Usage: linked.py LEDGER RUN_ID PROVIDER HOOK SHAPE [--kill] [--wait S]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import urllib.request
from collections.abc import Callable
from typing import Any

import oncelog
from oncelog.notices import posting, slack_blocks, telegram_message


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("ledger", "run_id", "provider", "hook", "shape"):
        parser.add_argument(name)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--wait", type=float, default=None)
    return parser.parse_args()


cfg = parse()


@oncelog.tool(kind="create", name="send", evidence_url=cfg.provider + "/effects?key={key}")
def send(to: str, *, idempotency_key: str) -> dict[str, Any]:
    body = {
        "key": idempotency_key, "run": cfg.run_id, "payload": {"to": to},
        "pid": os.getpid(), "kill_before_answer": cfg.kill,
    }  # fmt: skip
    request = urllib.request.Request(
        cfg.provider + "/effect", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result


def agent() -> None:
    shapes: dict[str, Callable[[oncelog.PersonNeeded], dict[str, Any]]] = {
        "slack": slack_blocks, "telegram": functools.partial(telegram_message, chat_id=7),
    }  # fmt: skip
    shape = shapes.get(cfg.shape)
    with (
        oncelog.open(
            cfg.ledger,
            approval_poll=0.2,
            on_alert=None if shape is None else posting(cfg.hook, shape),
            alert_webhook=cfg.hook if shape is None else None,
        ) as ledger,  # fmt: skip
        ledger.run(cfg.run_id) as run,
    ):
        run.effect("mail", send, "customer@example.com")
    print("completed", flush=True)


if __name__ == "__main__":
    oncelog.run_main(agent, wait_for_person=cfg.wait)
