"""What a person may give as the result of an effect they resolve as ``done``.

A tool can declare it: ``oncelog.tool(result_schema=...)`` (a JSON Schema the result must
match), or the MCP proxy for a server's tool (``form="mcp"``: the result is an MCP
``CallToolResult``, built from a plain text when a person gives one, and checked against
the tool's output schema). The declaration is stored in the ledger by tool name, so that
``Ledger.resolve`` checks it in whatever process a person decides in.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from ._schema import problems
from .records._value import NamedTuple

Form = Literal["json", "mcp"]


class ResultContract(NamedTuple):
    """The form a person's result for a tool must take. (A named tuple: a frozen
    dataclass costs the opening of a ledger its generated methods' compilation.)"""

    form: Form = "json"
    schema: dict[str, Any] | None = None  # for "mcp": the tool's output schema

    def to_json(self) -> str:
        # Canonical, as the journal records it (``result_declared``).
        contract = {"form": self.form, "schema": self.schema}
        return json.dumps(contract, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> ResultContract:
        data = json.loads(text)
        return cls(data.get("form", "json"), data.get("schema"))

    def shape(self, result: Any) -> Any:
        """``result`` as it will be recorded; ``ValueError`` saying what is wrong."""
        if self.form == "mcp":
            return _mcp_result(result, self.schema)
        _check(result, self.schema, "the result")
        return result


def _check(value: Any, schema: dict[str, Any] | None, what: str) -> None:
    found = problems(value, schema) if schema is not None else []
    if found:
        raise ValueError(f"{what} does not match the tool's schema: {'; '.join(found[:5])}")


def _mcp_result(result: Any, output_schema: dict[str, Any] | None) -> dict[str, Any]:
    """An MCP tool result: given whole (``{"content": [...]}``), or built from a text (or,
    for a tool with an output schema, from its structured content or that as JSON text)."""
    if isinstance(result, dict) and "content" in result:
        return _mcp_whole(result, output_schema)
    if output_schema is None:
        text = result if isinstance(result, str) else json.dumps(result)
        return {"content": [{"type": "text", "text": text}]}
    structured = result
    if isinstance(result, str):
        try:
            structured = json.loads(result)
        except ValueError:
            raise ValueError(
                "this tool declares an output schema: give its structured content as JSON "
                f"(schema: {json.dumps(output_schema)[:300]})"
            ) from None
    _check(structured, output_schema, "the structured content")
    text = json.dumps(structured)
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured}


def _mcp_whole(result: dict[str, Any], output_schema: dict[str, Any] | None) -> dict[str, Any]:
    content = result["content"]
    if not isinstance(content, list) or not all(
        isinstance(c, dict) and isinstance(c.get("type"), str) for c in content
    ):
        raise ValueError('an MCP result\'s "content" is a list of {"type": ..., ...} blocks')
    unknown = set(result) - {"content", "structuredContent", "isError", "_meta"}
    if unknown:
        raise ValueError(f"an MCP result has no fields {sorted(unknown)}")
    if output_schema is not None and not result.get("isError"):
        if "structuredContent" not in result:
            raise ValueError('this tool declares an output schema: give "structuredContent"')
        _check(result["structuredContent"], output_schema, "the structured content")
    return result
