"""Equal numbers are one subject (issue 41, item 2): ``once_per`` returning ``42`` in one
run and ``42.0`` in another names one refund, not two.

The refunder (``subject_agents/refunder.py``) pays through a provider process that ignores
idempotency keys, so its records count every refund that reached it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

import oncelog
from oncelog.runtime._subjects import subject_text

from .support.provider_process import running_provider
from .test_attack_subjects import performed, refund


def text_of(*parts: Any) -> str:
    """The subject text of a tool whose ``once_per`` returns ``parts``."""
    spec = oncelog.tool(kind="payment", once_per=lambda: parts)(lambda: None).spec
    return subject_text(spec, {"args": [], "kwargs": {}}, "run", "step")


@pytest.mark.parametrize(
    ("parts", "text"),
    [
        (("refund", 42.0), '["refund",42]'),
        (("refund", 42), '["refund",42]'),
        (("refund", 1e3), '["refund",1000]'),
        (("refund", -0.0), '["refund",0]'),
        (("refund", 0.0), '["refund",0]'),
        (("refund", 2.5), '["refund",2.5]'),
        (("refund", 2**53 - 1.0), f'["refund",{2**53 - 1}]'),
        (("refund", 2**70), f'["refund",{2**70}]'),  # an int is exact at any size
        (("refund", "42"), '["refund","42"]'),  # a string stays a string
        (("refund", True), '["refund",true]'),  # true is not 1
        (("refund", None), '["refund",null]'),
    ],
)
def test_a_subject_is_written_in_one_canonical_form(parts: tuple[Any, ...], text: str) -> None:
    assert text_of(*parts) == text


class Order(int):
    pass


class Name(str):
    pass


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (2.0**53, "one of several integers"),
        (-1e300, "one of several integers"),
        (float("nan"), "a subject is a string"),
        (float("-inf"), "a subject is a string"),
        (Order(42), "a subject is a string"),  # may compare or print as it likes
        (Name("42"), "a subject is a string"),
        (__import__("decimal").Decimal("42"), "a subject is a string"),
        (10**600, "longer than"),
    ],
)
def test_a_number_with_no_one_canonical_form_is_refused(part: Any, said: str) -> None:
    with pytest.raises(oncelog.ConfigurationError, match=said):
        text_of("refund", part)


def test_one_refund_for_42_and_42_point_0_in_two_runs(store_url: str, tmp_path: Path) -> None:
    """Run a refunds order 42 (an int), run b order 42.0 (a float): the provider performs
    one refund; run b sends nothing, and stops for a person since its arguments, as
    recorded, differ from run a's."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        first = refund(store_url, "run-a", provider, "42", "--order-json")
        again = refund(store_url, "run-b", provider, "42.0", "--order-json")
        assert first.returncode == 0, first.stderr
        [answer] = performed(provider, "run-a", "run-b")
        assert provider.requests("run-b") == []
    assert json.loads(first.stdout) == answer
    # Its arguments are not the same text (42.0), so a payment's drift policy asks a person.
    assert again.returncode == 3, again.stderr
    assert "ArgumentDrift: [\"refund\",42] was done by run 'run-a'" in again.stderr


REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}, "cents": {"type": "integer"}},
}


def proxy_calls(
    store_url: str, tmp_path: Path, once_per: Any, calls: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    """One client session through a real ``oncelog mcp-proxy`` process in front of the
    test's MCP server process: each ``(run, arguments)`` one ``refund`` call in that run."""
    import anyio
    import mcp.types as types
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from oncelog.integrations.mcp_proxy import RUN_META

    from .integration_agents.processes import ROOT
    from .support.launch import PYTHON, environment

    config = tmp_path / "tools.json"
    config.write_text(json.dumps({"tools": {"refund": {"kind": "payment", "once_per": once_per}}}))
    server = ["-m", "tests.integration_agents.mcp_server", "--effects", str(tmp_path / "effects")]
    server += ["--requests", str(tmp_path / "requests")]
    server += ["--input-schemas", json.dumps({"refund": REFUND_SCHEMA})]
    params = StdioServerParameters(
        command=PYTHON, args=["-m", "oncelog", "mcp-proxy", "--db", store_url, "--config",
                              str(config), "--", PYTHON, *server],
        env=environment(), cwd=ROOT,
    )  # fmt: skip

    async def work() -> list[Any]:
        with anyio.fail_after(120):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                return [
                    await client.call_tool(
                        "refund", arguments, meta=cast(types.RequestParamsMeta, {RUN_META: run})
                    )
                    for run, arguments in calls
                ]

    return anyio.run(work)


def received(tmp_path: Path) -> int:
    """How many tools/call requests reached the upstream server."""
    path = tmp_path / "requests"
    return len(path.read_text().splitlines()) if path.exists() else 0


def said(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_the_proxy_refunds_order_42_once_whether_sent_as_42_or_42_point_0(
    store_url: str, tmp_path: Path
) -> None:
    """Through the proxy, the tool's input schema says ``order_id`` is an integer: 42 and
    42.0 are one subject and one call (42.0 is recorded and sent as 42, so the second run
    gets the first's receipt, no drift to stop it), the string "42" is refused before
    anything is recorded or sent, and so is 42.5. Counted at the upstream server process."""
    from .integration_agents.effect_log import EffectLog
    from .integration_agents.processes import require_framework

    require_framework("mcp", "mcp")
    answers = proxy_calls(store_url, tmp_path, ["order_id"], [
        ("run-a", {"order_id": 42, "cents": 500}),
        ("run-b", {"order_id": 42.0, "cents": 500}),
        ("run-c", {"order_id": "42", "cents": 500}),
        ("run-d", {"order_id": 42.5, "cents": 500}),
        ("run-e", {"order_id": 42, "cents": 500}),
    ])  # fmt: skip
    first, as_float, as_text, fraction, again = answers
    assert not first.is_error, said(first)
    assert (as_float.is_error, as_float.structured_content) == (False, first.structured_content)
    assert as_text.is_error
    assert "argument 'order_id' is '42', not integer" in said(as_text)
    assert fraction.is_error
    assert "argument 'order_id' is 42.5, not integer" in said(fraction)
    assert (again.is_error, again.structured_content) == (False, first.structured_content)
    assert [e["tool"] for e in EffectLog(tmp_path / "effects").entries()] == ["refund"]
    assert received(tmp_path) == 1
    with oncelog.open(store_url) as ledger:
        assert [len(ledger.steps(run)) for run in ("run-c", "run-d")] == [0, 0]


def test_types_the_config_declares_make_one_subject_where_the_schema_says_none(
    store_url: str, tmp_path: Path
) -> None:
    """The config declares ``order_id`` an integer (``{"order_id": "integer"}``): its
    type wins over the schema's (here an integer too), and 42.0 is 42."""
    from .integration_agents.effect_log import EffectLog
    from .integration_agents.processes import require_framework

    require_framework("mcp", "mcp")
    first, as_float, as_bool = proxy_calls(store_url, tmp_path, {"order_id": "integer"}, [
        ("run-a", {"order_id": 7, "cents": 1}),
        ("run-b", {"order_id": 7.0, "cents": 1}),
        ("run-c", {"order_id": True, "cents": 1}),
    ])  # fmt: skip
    assert not first.is_error, said(first)
    assert (as_float.is_error, as_float.structured_content) == (False, first.structured_content)
    assert "argument 'order_id' is True, not integer" in said(as_bool)
    assert len(EffectLog(tmp_path / "effects").entries()) == received(tmp_path) == 1


def test_a_refund_an_older_version_recorded_as_42_point_0_is_not_performed_again(
    store_url: str, tmp_path: Path
) -> None:
    """Yesterday an older version refunded order 42.0 under the subject text
    ``["refund",42.0]``; today the subject is written ``["refund",42]``. Neither 42 nor
    42.0 refunds again: the older spelling's claim holds the subject."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        old = refund(store_url, "old", provider, "42.0", "--order-json", "--old-subject-text")
        assert old.returncode == 0, old.stderr
        as_int = refund(store_url, "new-int", provider, "42", "--order-json")
        as_float = refund(store_url, "new-float", provider, "42.0", "--order-json")
        [answer] = performed(provider, "old", "new-int", "new-float")
        assert provider.requests("new-int") == provider.requests("new-float") == []
    assert as_int.returncode == 3, as_int.stderr  # other arguments (42): a person looks
    assert "ArgumentDrift: [\"refund\",42] was done by run 'old'" in as_int.stderr
    assert as_float.returncode == 0, as_float.stderr  # the same arguments: its result
    assert json.loads(as_float.stdout) == json.loads(old.stdout) == answer
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok


def test_an_older_versions_effect_in_doubt_is_sent_again_under_its_first_key(
    store_url: str, tmp_path: Path
) -> None:
    """An older version sent the refund of order 42.0 under the key of
    ``["refund",42.0]`` and was killed before recording its outcome. Restarted by this
    version, inside the tool's dedupe window, the step is sent again under that same key,
    so the provider, which honours keys, performs it once."""
    with running_provider(tmp_path / "provider", "honours_keys") as provider:
        options = ("--order-json", "--no-probe", "--dedupe-window", "3600")
        killed = refund(
            store_url, "old", provider, "42.0", *options, "--old-subject-text",
            crash_at="after_call@refund",
        )  # fmt: skip
        assert killed.returncode == -9, killed.stderr
        again = refund(store_url, "old", provider, "42.0", *options)
        assert again.returncode == 0, again.stderr
        keys = {request.key for request in provider.requests("old")}
        assert len(keys) == 1
        [answer] = performed(provider, "old")
    assert json.loads(again.stdout) == answer


def test_an_older_versions_refund_in_doubt_holds_the_subject_for_42(
    store_url: str, tmp_path: Path
) -> None:
    """An older version's run is killed right after its intent on ``["refund",42.0]``
    and halts in doubt on its restart by this version (no probe): a run refunding order 42
    sends nothing and names it (exit 3); once a person decides the first was not done, the
    new run refunds, and the old run's restart gets its result."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        killed = refund(
            store_url, "old", provider, "42.0", "--order-json", "--no-probe",
            "--old-subject-text", crash_at="after_intent_commit@refund",
        )  # fmt: skip
        assert killed.returncode == -9, killed.stderr
        halted = refund(store_url, "old", provider, "42.0", "--order-json", "--no-probe")
        assert halted.returncode == 3, halted.stderr
        new = refund(store_url, "new", provider, "42", "--order-json")
        assert new.returncode == 3, new.stderr
        assert "SubjectInDoubt" in new.stderr
        assert "run old, step refund" in new.stderr
        assert performed(provider, "old", "new") == []
        with oncelog.open(store_url) as ledger:
            ledger.resolve("old", "refund", "not_done", by="ops")
        freed = refund(store_url, "new", provider, "42", "--order-json")
        assert freed.returncode == 0, freed.stderr
        resumed = refund(store_url, "old", provider, "42.0", "--order-json")
        [answer] = performed(provider, "old", "new")
        assert provider.requests("old") == []
    assert resumed.returncode == 3, resumed.stderr  # 42.0 after 42: drift, a person looks
    assert json.loads(freed.stdout) == answer
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok


def test_an_older_spelling_held_for_a_period_holds_it_for_another_agent(
    ledger: oncelog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent x's run, written as an older version wrote subjects, refunds order 42.0 for
    a day (``once_for``); agent y's run of this version refunds order 42 within the day and
    gets x's result (``drift="warn"``) without a call."""
    from oncelog.runtime import _subjects

    calls: list[str] = []

    @ledger.tool(kind="payment", name="refund", once_per=lambda order: ("refund", order),
                 once_for=86400, drift="warn")  # fmt: skip
    def pay(order: float, *, idempotency_key: str) -> dict[str, Any]:
        calls.append(idempotency_key)
        return {"refund": len(calls)}

    with monkeypatch.context() as older:
        older.setattr(_subjects, "_canonical", lambda part: part)
        with ledger.run("x-1", agent="x") as run:
            first = run.effect("refund", pay, 42.0)
    with ledger.run("y-1", agent="y") as run:
        assert run.effect("refund", pay, 42) == first
    assert len(calls) == 1
    assert ledger.verify().ok


@pytest.mark.parametrize(
    ("field", "types"),
    [
        ({"type": "integer"}, ("integer",)),
        ({"type": ["integer", "null"]}, ("integer", "null")),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, ("integer", "null")),
        ({"anyOf": [{"type": "integer"}, {"$ref": "#/x"}]}, ()),  # one branch says nothing
        ({"description": "an order"}, ()),
    ],
)
def test_a_fields_types_are_read_from_the_input_schema(
    field: dict[str, Any], types: tuple[str, ...]
) -> None:
    from oncelog.integrations._mcp_subjects import declared_types

    assert declared_types({"properties": {"order_id": field}}, "order_id") == types
    assert declared_types({"properties": {}}, "order_id") == ()


@pytest.mark.parametrize(
    ("value", "types", "subject"),
    [
        (42.0, ("integer",), 42),
        (-0.0, ("integer",), 0),
        (None, ("integer", "null"), None),
        ("A-42", ("string",), "A-42"),
        (False, ("boolean",), False),
        (2.5, ("number",), 2.5),
        ("42", (), "42"),  # undeclared: kept
    ],
)
def test_a_value_fitting_its_declared_type_is_taken_as_that_type(
    value: Any, types: tuple[str, ...], subject: Any
) -> None:
    from oncelog.integrations._mcp_subjects import typed

    taken = typed("refund", "order_id", value, types)
    assert (taken, type(taken)) == (subject, type(subject))


@pytest.mark.parametrize(
    ("value", "types"),
    [
        ("42", ("integer",)),
        (42.5, ("integer",)),
        (2.0**53, ("integer",)),
        (True, ("integer",)),
        (True, ("number",)),
        (42, ("string",)),
        (1, ("boolean",)),
        ([42], ("integer",)),
        (42, ("object",)),
    ],
)
def test_a_value_fitting_no_declared_type_is_refused(value: Any, types: tuple[str, ...]) -> None:
    from oncelog.integrations._mcp_subjects import typed

    with pytest.raises(oncelog.ConfigurationError, match="argument 'order_id' is"):
        typed("refund", "order_id", value, types)


@pytest.mark.parametrize("declared", [{"order_id": "int"}, {"order_id": []}, {"order_id": 5}])
def test_a_config_declaring_an_unknown_type_is_refused(tmp_path: Path, declared: Any) -> None:
    pytest.importorskip("mcp")
    from oncelog.integrations import mcp_proxy

    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": {"refund": {"kind": "payment", "once_per": declared}}}))
    with pytest.raises(oncelog.ConfigurationError, match="once_per declares types"):
        mcp_proxy.load_config(path)
