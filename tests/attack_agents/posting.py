"""An agent with one payment, POSTed with a real HTTP client and classified by oncelog's
shipped classifier for that client, for the attacks on the classifiers.

Usage: posting.py LEDGER RUN_ID URL --client requests|urllib|httpx [--attempts N]
       [--urllib3-retries N] [--httpx-retries N]

``--attempts`` gives the tool ``oncelog.Retry(N)`` (no wait). ``--urllib3-retries`` mounts
``urllib3.Retry(N)`` on the requests session, retrying a POST after a dropped connection
or a 503; ``--httpx-retries`` gives httpx's transport ``retries=N``. httpx follows
redirects (``follow_redirects=True``); requests and urllib do by default. It prints the
effect's result as one JSON line and exits through ``oncelog.run_main`` (3 halted).
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from typing import Any

import httpx
import requests
import urllib3

import oncelog
from oncelog.failures import Classifier
from oncelog.failures import httpx as httpx_failures
from oncelog.failures import requests as requests_failures
from oncelog.failures import urllib as urllib_failures

CLASSIFIERS: dict[str, Classifier] = {
    "requests": requests_failures.classify,
    "urllib": urllib_failures.classify,
    "httpx": httpx_failures.classify,
}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("url")
    parser.add_argument("--client", choices=sorted(CLASSIFIERS), required=True)
    parser.add_argument("--attempts", type=int, default=0)
    parser.add_argument("--urllib3-retries", type=int, default=0)
    parser.add_argument("--httpx-retries", type=int, default=0)
    return parser.parse_args()


def post(options: argparse.Namespace, body: dict[str, Any]) -> None:
    if options.client == "urllib":
        data = json.dumps(body).encode()
        urllib.request.urlopen(options.url, data=data, timeout=10).close()
    elif options.client == "requests":
        with requests.Session() as session:
            retries = urllib3.Retry(
                options.urllib3_retries, allowed_methods=None, status_forcelist=[503],
                backoff_factor=0, raise_on_status=False,
            )  # fmt: skip
            session.mount("http://", requests.adapters.HTTPAdapter(max_retries=retries))
            session.post(options.url, json=body, timeout=10).raise_for_status()
    else:
        transport = httpx.HTTPTransport(retries=options.httpx_retries)
        with httpx.Client(transport=transport, follow_redirects=True, timeout=10) as client:
            client.post(options.url, json=body).raise_for_status()


def agent(options: argparse.Namespace) -> None:
    with oncelog.open(options.ledger) as ledger:

        @ledger.tool(
            kind="payment", name="charge", failures=CLASSIFIERS[options.client],
            retry=oncelog.Retry(options.attempts, 0.0, jitter=0.0) if options.attempts else None,
        )  # fmt: skip
        def charge(cents: int, *, idempotency_key: str) -> dict[str, Any]:
            post(options, {"key": idempotency_key, "cents": cents})
            return {"charged": cents}

        with ledger.run(options.run_id) as run:
            print(json.dumps(run.effect("charge", charge, 500)), flush=True)


if __name__ == "__main__":
    parsed = parse()
    oncelog.run_main(lambda: agent(parsed))
