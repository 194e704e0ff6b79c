"""A process shipping its ledger's journal to an HTTP sink, for the hostile-sink tests:
a ``Shipper`` thread sending to ``HttpSink(SINK, timeout=TIMEOUT)``, tried again quickly
after each failure, until the sink has taken everything or failed TRIES times. The
shipper's log goes to stderr; the counters, at the end, to stdout as JSON.

Usage: shipping.py LEDGER SINK STATE TIMEOUT TRIES
"""

from __future__ import annotations

import json
import logging
import sys
import time

import oncelog
from oncelog.sinks import HttpSink, Shipper


def main() -> None:
    ledger_url, sink_url, state_file, timeout, tries = sys.argv[1:6]
    logging.basicConfig(stream=sys.stderr, format="%(name)s: %(message)s")
    with (
        oncelog.open(ledger_url, create=False) as ledger,
        Shipper(
            ledger, HttpSink(sink_url, timeout=float(timeout)), state_file,
            poll=0.05, max_backoff=0.1,
        ) as shipper,
    ):  # fmt: skip
        shipper.start()
        while shipper.failures < int(tries) and (shipper.shipped == 0 or shipper.lag):
            time.sleep(0.02)
    print(json.dumps({"shipped": shipper.shipped, "failures": shipper.failures}))


if __name__ == "__main__":
    main()
