"""Serving the console: a socket bound before the app is made (so the login URL and the
Host check know the real port), and uvicorn with nothing in its logs that could leak."""

from __future__ import annotations

import socket

import uvicorn
from starlette.types import ASGIApp

from oncelog import ConfigurationError


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def serve(app: ASGIApp, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until SIGINT or SIGTERM."""
    config = uvicorn.Config(
        app,
        lifespan="off",
        access_log=False,  # request lines would carry the login token
        log_level="warning",
        server_header=False,
        proxy_headers=False,  # no proxy is trusted to say who the client is
    )
    uvicorn.Server(config).run(sockets=[sock])
