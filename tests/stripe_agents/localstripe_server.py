"""Run localstripe for the tests: on 127.0.0.1, on a port the kernel picks, with no state
file, printing the port as its first line once the socket listens.

    python tests/stripe_agents/localstripe_server.py

``localstripe --port N`` would need a port chosen in advance (a race with other
processes), listens on IPv6 only (fails where IPv6 is off) and saves its state after
every write to ``/tmp/localstripe.pickle``, shared by every localstripe on the machine.
Here the same server application runs on a socket bound before the port is printed, and
its state lives in this process only: a new server starts empty.
"""

from __future__ import annotations

import socket

from aiohttp import web
from localstripe import resources, server  # type: ignore[import-untyped]


def _keep_in_memory(store: object) -> None:
    """Replaces the save to the shared /tmp file; each test server starts from nothing."""


def main() -> None:
    resources.Store.dump_to_disk = _keep_in_memory
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a client that connects at once waits in the
    # backlog until the application serves it, instead of being refused.
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    web.run_app(server.app, sock=sock, print=None, access_log=None, handle_signals=True)


if __name__ == "__main__":
    main()
