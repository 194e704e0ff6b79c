"""The gateway's parts without processes: its config refused with what is wrong, the
``requestState`` bound to its call and expiring, tokens matched whole, a call's step from
its name or its canonical arguments."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import oncelog

from .integration_agents.processes import require_framework

UPSTREAMS = {"shop": {"url": "http://127.0.0.1:9/mcp"}}
CLIENTS = {"bot": {"token_sha256": hashlib.sha256(b"t" * 20).hexdigest(), "runs": ["r-*"],
                   "tools": ["refund", "send_*"]}}  # fmt: skip


def load(tmp_path: Path, **settings: Any) -> Any:
    require_framework("mcp", "gateway")
    from oncelog.integrations import mcp_gateway

    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"tools": {}, "upstreams": UPSTREAMS, "clients": CLIENTS,
                                **settings}))  # fmt: skip
    return mcp_gateway.load_config(path)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"upstreams": {}}, "upstreams"),
        ({"upstreams": {"a": {"url": "ftp://x"}}}, "upstream 'a'"),
        ({"upstreams": {"a": {"url": "http://x/mcp", "command": ["x"]}}}, "upstream 'a'"),
        ({"clients": {}}, "would let nobody in"),
        ({"clients": {"c": {"token_env": "GATEWAY_NO_SUCH_TOKEN"}}}, "no token of at least"),
        ({"clients": {"c": {"token_sha256": "abc"}}}, "64 hex digits"),
        ({"clients": {"c": {"token_sha256": "a" * 64, "runs": "*"}}}, "list of patterns"),
        ({"clients": {"c": {"token_sha256": "a" * 64, "token_env": "X"}}}, "one"),
        ({"lease_wait": 0}, "lease_wait"),
        ({"max_body_bytes": "big"}, "max_body_bytes"),
        ({"allowed_origins": "https://a"}, "allowed_origins"),
        ({"sessions": True}, "unknown settings"),
        ({"tools": {"refund": "charge"}}, "unknown tool kind"),
    ],
)
def test_a_bad_config_is_refused_saying_what(tmp_path: Path, settings: Any, said: str) -> None:
    with pytest.raises(oncelog.ConfigurationError, match=said):
        load(tmp_path, **settings)


def test_a_token_matches_its_client_whole(tmp_path: Path) -> None:
    from oncelog.integrations._gateway_http import client_of

    clients = load(tmp_path).clients
    assert client_of(f"Bearer {'t' * 20}", clients) is clients[0]
    assert client_of(f"bearer {'t' * 20}", clients) is clients[0]
    for wrong in (
        None,
        "",
        "Bearer",
        f"Bearer {'t' * 19}",
        f"Bearer {'t' * 21}",
        f"Basic {'t' * 20}",
    ):
        assert client_of(wrong, clients) is None
    (bot,) = clients
    assert bot.may_run("r-1")
    assert not bot.may_run("x-1")
    assert bot.may_call("send_email")
    assert not bot.may_call("delete_account")


def test_a_request_state_is_good_only_for_its_call_and_time() -> None:
    require_framework("mcp", "gateway")
    from oncelog.integrations._gateway_state import StateRefused, StateSeal

    seal = StateSeal(b"k" * 32, ttl=60)
    claims = {"client": "bot", "run": "r-1", "step": "s/1", "tool": "t", "args": "a" * 64}
    state = seal.seal({**claims, "request": 3})
    assert seal.check(state, claims)["request"] == 3
    for key in claims:
        with pytest.raises(StateRefused, match=f"another {key}"):
            seal.check(state, {**claims, key: "other"})
    with pytest.raises(StateRefused, match="signature"):
        StateSeal(b"j" * 32, ttl=60).check(state, claims)  # another ledger's secret
    with pytest.raises(StateRefused, match="not one this gateway made"):
        seal.check("x" * 5000, claims)
    expired = StateSeal(b"k" * 32, ttl=-1).seal(claims)
    with pytest.raises(StateRefused, match="expired"):
        seal.check(expired, claims)


def test_a_calls_step_comes_from_its_name_or_its_canonical_arguments() -> None:
    require_framework("mcp", "gateway")
    from oncelog.integrations._gateway_calls import digest_of, step_of

    schema = {"type": "object", "properties": {"order_id": {"type": "integer"}}}
    same = digest_of({"order_id": 7, "note": "x"}, schema)
    assert digest_of({"note": "x", "order_id": 7.0}, schema) == same
    assert digest_of({"order_id": 7, "note": "y"}, schema) != same
    assert digest_of({"order_id": "7", "note": "x"}, schema) != same  # a string stays one
    assert step_of("refund", None, same) == f"refund/args:{same[:32]}"
    assert step_of("refund", "call_1", same) == "refund/call_1"
    for bad in ("", "x" * 201, "a\nb"):
        with pytest.raises(oncelog.UsageError):
            step_of("refund", bad, same)
