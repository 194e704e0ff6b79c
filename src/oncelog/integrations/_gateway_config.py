"""The config of ``oncelog gateway``: the MCP proxy's declarations (``_mcp_config``), the
upstream servers, the clients and what each may reach, and the HTTP limits.

    {
      "tools": {"refund": {"kind": "payment", "once_per": ["order_id"]}},
      "upstreams": {"shop": {"url": "http://127.0.0.1:9000/mcp"},
                    "mail": {"command": ["python", "mail_server.py"]}},
      "clients": {"support-bot": {"token_env": "SUPPORT_BOT_TOKEN",
                                  "runs": ["ticket-*"], "tools": ["*"]}},
      "default_run": null,
      "allowed_origins": ["https://agents.example.com"]
    }

A client's token is named by the environment variable that holds it (``token_env``,
read at the start) or by its SHA-256 in hex (``token_sha256``), so that no token need be
written in the file. ``runs`` and ``tools`` are shell-style patterns (``fnmatch``), one of
which a call's run id, and its tool, must match; left out, nothing matches.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from oncelog import ConfigurationError

from ._mcp_config import CONFIG_KEYS, ProxyConfig, parse_config, read_json, unknown_settings

GATEWAY_KEYS = CONFIG_KEYS | {
    "upstreams", "clients", "default_run", "allowed_origins", "console_url", "lease_wait",
    "max_body_bytes", "body_seconds", "request_state_ttl",
}  # fmt: skip
_CLIENT_KEYS = {"token_env", "token_sha256", "runs", "tools"}
_HEX64 = re.compile(r"[0-9a-f]{64}")
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Upstream:
    """An MCP server the gateway calls: by Streamable HTTP (``url``) or as its child on
    stdio (``command``)."""

    name: str
    url: str | None = None
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClientRule:
    """One client: the SHA-256 of its bearer token, and the runs and tools it may reach."""

    name: str
    token_sha256: bytes
    runs: tuple[str, ...]
    tools: tuple[str, ...]

    def may_run(self, run_id: str) -> bool:
        return any(fnmatchcase(run_id, pattern) for pattern in self.runs)

    def may_call(self, tool: str) -> bool:
        return any(fnmatchcase(tool, pattern) for pattern in self.tools)


@dataclass(frozen=True)
class GatewayConfig:
    declarations: ProxyConfig
    upstreams: Mapping[str, Upstream]
    clients: Sequence[ClientRule]
    default_run: str | None = None
    allowed_origins: frozenset[str] = field(default_factory=frozenset)
    console_url: str | None = None
    lease_wait: float = 60.0  # seconds a call waits for its run held by another call
    max_body_bytes: int = 1 << 20
    body_seconds: float = 10.0  # a body that takes longer to arrive is refused (408)
    request_state_ttl: float = 86400.0


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """Read and check the gateway's JSON config; ``ConfigurationError`` says what is wrong."""
    data = read_json(path, "gateway")
    unknown_settings(data, path, GATEWAY_KEYS)
    upstreams = _upstreams(data.get("upstreams"), path)
    clients = _clients(data.get("clients"), path)
    origins = data.get("allowed_origins", [])
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
        raise ConfigurationError(f"{path}: allowed_origins is a list of origins")
    default_run = data.get("default_run")
    if default_run is not None and (not isinstance(default_run, str) or not default_run):
        raise ConfigurationError(f"{path}: default_run is a run id or null")
    return GatewayConfig(
        declarations=parse_config(data, path), upstreams=upstreams, clients=clients,
        default_run=default_run, allowed_origins=frozenset(origins),
        console_url=data.get("console_url"),
        lease_wait=_positive(data, "lease_wait", 60.0, path),
        max_body_bytes=int(_positive(data, "max_body_bytes", 1 << 20, path)),
        body_seconds=_positive(data, "body_seconds", 10.0, path),
        request_state_ttl=_positive(data, "request_state_ttl", 86400.0, path),
    )  # fmt: skip


def _positive(data: Mapping[str, Any], key: str, default: float, path: str | Path) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"{path}: {key} is a number above 0, not {value!r}")
    return float(value)


def _upstreams(value: Any, path: str | Path) -> dict[str, Upstream]:
    if not isinstance(value, dict) or not value:
        raise ConfigurationError(
            f'{path}: "upstreams" names at least one MCP server: '
            '{"NAME": {"url": "http://HOST:PORT/mcp"}} or {"NAME": {"command": ["python", "s.py"]}}'
        )
    found = {}
    for name, spec in value.items():
        url = spec.get("url") if isinstance(spec, dict) else None
        command = spec.get("command") if isinstance(spec, dict) else None
        good_url = isinstance(url, str) and url.startswith(("http://", "https://"))
        good_command = isinstance(command, list) and command and all(
            isinstance(part, str) for part in command
        )  # fmt: skip
        if not isinstance(spec, dict) or set(spec) - {"url", "command"} or good_url == bool(
            good_command
        ):  # fmt: skip
            raise ConfigurationError(
                f'{path}: upstream {name!r} is either {{"url": "http(s)://..."}} or '
                f'{{"command": ["program", "arg", ...]}}'
            )
        found[name] = Upstream(name, url if good_url else None, tuple(command or ()))
    return found


def _clients(value: Any, path: str | Path) -> tuple[ClientRule, ...]:
    if not isinstance(value, dict) or not value:
        raise ConfigurationError(
            f'{path}: "clients" names at least one client and its token: '
            '{"NAME": {"token_env": "ENVVAR", "runs": ["*"], "tools": ["*"]}}; '
            "a gateway without clients would let nobody in"
        )
    return tuple(_client(name, spec, path) for name, spec in value.items())


def _client(name: str, spec: Any, path: str | Path) -> ClientRule:
    if not isinstance(spec, dict) or set(spec) - _CLIENT_KEYS:
        raise ConfigurationError(f"{path}: client {name!r} takes {sorted(_CLIENT_KEYS)}")
    if ("token_env" in spec) == ("token_sha256" in spec):
        raise ConfigurationError(f"{path}: client {name!r} has token_env or token_sha256, one")
    if "token_env" in spec:
        token = os.environ.get(str(spec["token_env"]), "")
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigurationError(
                f"{path}: client {name!r}: ${spec['token_env']} holds no token of at least "
                f"{MIN_TOKEN_CHARS} characters"
            )
        digest = hashlib.sha256(token.encode()).digest()
    else:
        hexed = spec["token_sha256"]
        if not isinstance(hexed, str) or not _HEX64.fullmatch(hexed.lower()):
            raise ConfigurationError(f"{path}: client {name!r}: token_sha256 is 64 hex digits")
        digest = bytes.fromhex(hexed)
    patterns = []
    for key in ("runs", "tools"):
        listed = spec.get(key, [])
        if not isinstance(listed, list) or not all(isinstance(p, str) and p for p in listed):
            raise ConfigurationError(f"{path}: client {name!r}: {key} is a list of patterns")
        patterns.append(tuple(listed))
    return ClientRule(name, digest, patterns[0], patterns[1])
