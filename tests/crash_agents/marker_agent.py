"""An agent that posts one message to a provider that takes no key (``support/
marker_provider.py``), with its effect's marker stamped in, and finds it again by that
marker when a restart finds it in doubt. The crash tests run it as a subprocess and kill
it (``ONCELOG_CRASH_AT``).

    python tests/crash_agents/marker_agent.py LEDGER RUN PROVIDER_URL [--consistent-after S]
        [--once-for S] [--lose-first]

It prints the effect's result as one JSON line and exits through ``oncelog.run_main``
(0 completed, 3 a person must act). ``--once-for``: the post's subject is the channel,
claimed for that long (a post each period). ``--lose-first``: the first call of the
process fails in doubt (a timeout) without reaching the provider.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
import urllib.request
from datetime import timedelta
from typing import Any

import oncelog
from oncelog import markers


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run")
    parser.add_argument("provider")
    parser.add_argument("--consistent-after", type=float, default=None)
    parser.add_argument("--once-for", type=float, default=None)
    parser.add_argument("--lose-first", action="store_true")
    return parser.parse_args()


def search(provider: str, marker: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"q": marker})
    with urllib.request.urlopen(f"{provider}/search?{query}", timeout=30) as answer:
        items: list[dict[str, Any]] = json.loads(answer.read())["items"]
    return items


def post(provider: str, text: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{provider}/messages", data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as answer:
        message: dict[str, Any] = json.loads(answer.read())
    return message


def agent(options: argparse.Namespace) -> None:
    after = options.consistent_after
    probe = markers.MarkerProbe(
        search=lambda marker: search(options.provider, marker),
        marker_of=lambda item: markers.stamped(item["text"]),
        result_of=lambda item: {"id": item["id"]},
        consistent_after=None if after is None else timedelta(seconds=after),
    )

    lost: list[str] = []
    subject: dict[str, Any] = {}
    if options.once_for is not None:
        subject = {"once_per": lambda text: ("channel", "support"), "once_for": options.once_for}

    @oncelog.tool(kind="create", name="post_message", probe=probe, **subject)
    def post_message(text: str, *, idempotency_key: str) -> dict[str, Any]:
        if options.lose_first and not lost:
            lost.append(idempotency_key)
            raise TimeoutError("the request timed out")  # it never reached the provider
        return {"id": post(options.provider, markers.stamp(text, idempotency_key))["id"]}

    with oncelog.open(options.ledger) as ledger, ledger.run(options.run) as run:
        result = run.effect("post", post_message, "the refund is on its way")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    arguments = parse()
    oncelog.run_main(lambda: agent(arguments))
