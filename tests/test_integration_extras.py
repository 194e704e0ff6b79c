"""Each integration imports its framework only when used, and without it says which extra
to install; the guards refuse a tool whose kind is not declared, and a bad proxy config,
before anything runs."""

from __future__ import annotations

import importlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import oncelog
from oncelog.integrations import Policy, current_idempotency_key

from .integration_agents.processes import require_framework
from .support.launch import python

FRAMEWORKS = [
    ("langgraph", "langgraph", "langgraph"),
    ("openai_agents", "agents", "openai-agents"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("mcp_proxy", "mcp", "mcp"),
    ("mcp_gateway", "mcp", "gateway"),
    ("mcp_gateway", "uvicorn", "gateway"),
    ("celery", "celery", "celery"),
    ("dbos", "dbos", "dbos"),
    ("temporal", "temporalio", "temporal"),
    ("crewai", "crewai", "crewai"),
]


@pytest.mark.parametrize(("module", "framework", "extra"), FRAMEWORKS)
def test_a_missing_framework_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, framework, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, f"oncelog.integrations.{module}", raising=False)
    with pytest.raises(oncelog.ConfigurationError) as missing:
        importlib.import_module(f"oncelog.integrations.{module}")
    # The tests run from a checkout: its path, a line that works wherever it is pasted.
    checkout = shlex.quote(f"{Path(__file__).resolve().parent.parent}[{extra}]")
    assert f"pip install {checkout} (oncelog's checkout)" in str(missing.value)


def test_the_key_is_only_known_inside_a_guarded_call() -> None:
    with pytest.raises(oncelog.NoActiveRun):
        current_idempotency_key()


def test_a_policy_checks_its_kind() -> None:
    with pytest.raises(oncelog.ConfigurationError, match="unknown tool kind"):
        Policy("send")  # type: ignore[arg-type]


def test_a_langgraph_tool_without_a_kind_is_refused(tmp_path: Path) -> None:
    require_framework("langgraph", "langgraph")
    from langchain_core.tools import tool

    from oncelog.integrations import langgraph as oncelog_langgraph

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        return to

    with (
        oncelog.open(str(tmp_path / "ledger.db")) as ledger,
        pytest.raises(oncelog.UnguardedTool, match="'send_email' is not guarded"),
    ):
        oncelog_langgraph.ToolNode(ledger, [send_email], graph="g", kinds={"lookup": "read"})


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"tools": {"send_email": "send"}}, "unknown tool kind"),
        ({"tools": {"send_email": {"kind": "create", "retries": 3}}}, "an object with"),
        ({"tools": {}, "run_id": "x"}, "unknown settings"),
        ({"tools": {"refund": {"kind": "payment", "once_pr": ["id"]}}}, r"unknown: \['once_pr'\]"),
        ({"tools": {"refund": {"kind": "payment", "once_per": "id"}}}, "a list of argument names"),
        ({"tools": {"refund": {"kind": "payment", "once_per": []}}}, "a list of argument names"),
        ({"tools": {"refund": {"kind": "payment", "once_for": 60}}}, "need once_per"),
        ({"tools": {"refund": {"kind": "payment", "once_per": ["id"], "repeat": "no"}}}, "repeat"),
        ({"trust_annotations": "false"}, "trust_annotations is true or false"),
    ],
)
def test_a_bad_proxy_config_is_refused(tmp_path: Path, config: object, error: str) -> None:
    require_framework("mcp", "mcp")
    from oncelog.integrations import mcp_proxy

    path = tmp_path / "tools.json"
    path.write_text(json.dumps(config))
    with pytest.raises(oncelog.ConfigurationError, match=error):
        mcp_proxy.load_config(path)


def test_a_proxy_config_gives_kinds_and_where_runs_come_from(tmp_path: Path) -> None:
    require_framework("mcp", "mcp")
    from oncelog.integrations import mcp_proxy

    path = tmp_path / "tools.json"
    config = {"tools": {"refund": {"kind": "payment", "key_ttl": 60}}, "run_argument": "ticket"}
    path.write_text(json.dumps(config))
    loaded = mcp_proxy.load_config(path)
    assert loaded.choose("refund").policy == Policy("payment", dedupe_window=60)  # key_ttl
    assert loaded.choose("lookup").policy is None
    assert loaded.run_argument == "ticket"


@pytest.mark.parametrize(
    ("read_only", "destructive", "idempotent", "kind"),
    [
        (None, None, None, "destructive"),  # the spec's defaults: may destroy, not idempotent
        (True, None, None, "read"),
        (True, True, False, "read"),  # destructiveHint means something only when not read-only
        (False, False, True, "upsert"),
        (None, False, None, "create"),
        (None, None, True, "destructive"),  # idempotent, but not said to be non-destructive
        (False, True, True, "destructive"),
    ],
)
def test_annotations_propose_a_kind_with_the_specs_defaults(
    read_only: bool | None, destructive: bool | None, idempotent: bool | None, kind: str
) -> None:
    from oncelog.integrations._mcp_kinds import Hints

    assert Hints(read_only, destructive, idempotent).kind() == kind


def test_the_config_wins_and_an_untrusted_servers_hints_are_never_read() -> None:
    from oncelog.integrations._mcp_kinds import Hints, choose

    read_only = Hints(read_only=True)
    create = Policy("create")

    def source(hints: Hints | None, configured: Policy | None, trusted: bool) -> object:
        chosen = choose("t", hints, configured=configured, trusted=trusted, default=create)
        return chosen.source, None if chosen.policy is None else chosen.policy.kind

    assert source(read_only, Policy("payment"), True) == ("config", "payment")
    assert source(read_only, None, True) == ("annotation", "read")
    assert source(read_only, None, False) == ("default", "create")
    assert source(None, None, True) == ("default", "create")  # no annotations: no proposal
    chosen = choose("t", None, configured=None, trusted=True, default=None)
    assert (chosen.policy, chosen.source, chosen.waits_for_a_person) == (None, None, False)


def test_a_proxy_config_names_a_subject_by_argument_fields(tmp_path: Path) -> None:
    """JSON holds no function: ``once_per`` names the fields whose values, after the
    tool's name, are the subject; a field the tool's input schema lacks stops the proxy,
    and a call without one of them is refused rather than sharing one subject."""
    require_framework("mcp", "mcp")
    import mcp.types as types

    from oncelog.integrations import _mcp_config, mcp_proxy

    path = tmp_path / "tools.json"
    refund = {"kind": "payment", "once_per": ["customer_id", "ticket"], "once_for": 3600}
    path.write_text(json.dumps({"tools": {"refund": refund}}))
    policy = mcp_proxy.load_config(path).choose("refund").policy
    assert policy is not None
    assert policy.once_per is not None
    assert policy.once_per(customer_id="c1", ticket=7, cents=5) == ("refund", "c1", 7)
    with pytest.raises(oncelog.ConfigurationError, match="no argument 'ticket'"):
        policy.once_per(customer_id="c1")

    schema = {"type": "object", "properties": {"customer_id": {}, "cents": {}}}
    tool = types.Tool(name="refund", input_schema=schema)
    with pytest.raises(oncelog.ConfigurationError, match=r"once_per names \['ticket'\]"):
        _mcp_config.check_subject(tool, policy)


def test_the_core_imports_no_engine() -> None:
    check = (
        "import sys, oncelog, oncelog.integrations; "
        "print(sorted({'celery', 'dbos', 'temporalio'} & set(sys.modules)))"
    )
    done = subprocess.run(
        python("-c", check), capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
