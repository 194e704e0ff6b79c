"""A probe an MCP guard's config declares as an upstream tool (``oncelog gateway`` and
``oncelog mcp-proxy``): ``"probes": {"send_email": {"tool": "find_email", "key_argument":
"key"}}`` (``key_argument`` defaults to ``idempotency_key``).

The probe tool is called with the call's idempotency key (the one the upstream got in
``_meta["io.oncelog/idempotency-key"]``) and answers with ``structuredContent``:

- ``{"found": true, "result": {...}}``: the effect happened, and ``result`` is the call's
  own result as the upstream kept it (an MCP ``CallToolResult``): it is recorded as the
  call's, what the client gets. Without ``result``, the probe's whole answer is; a tool
  with an output schema needs a ``result`` whose ``structuredContent`` fits it, or nobody
  can tell (a client would refuse anything else as that tool's result);
- ``{"found": false}``: it did not, and never will under that key (the upstream must be
  able to say so: a search it cannot trust answers neither), so the call is made again;
- anything else, an error result, or a probe that cannot be reached: oncelog cannot tell,
  and the call waits for a person, as without a probe.

Nothing here imports MCP: a result comes as the JSON the upstream sent.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog import CANNOT_TELL, NOT_FOUND, ConfigurationError, Found, ProbeAnswer

from ._mcp_kinds import Choice

log = logging.getLogger("oncelog")

_KEYS = {"tool", "key_argument"}
Ask = Callable[[str, Any, str], Mapping[str, Any]]  # (tool, arguments, key) -> its result


@dataclass(frozen=True)
class ProbeTool:
    """An upstream tool asked, with a call's key as ``key_argument``, whether that call's
    effect happened."""

    tool: str
    key_argument: str = "idempotency_key"


def parse_probes(value: Any, path: str | Path) -> dict[str, ProbeTool]:
    """The config's ``probes``, by the tool each probes."""
    shape = '{"TOOL": {"tool": "PROBE_TOOL", "key_argument": "idempotency_key"}}'
    if not isinstance(value, dict):
        raise ConfigurationError(f"{path}: probes is {shape}")
    found = {}
    for name, spec in value.items():
        tool, argument = (spec.get("tool"), spec.get("key_argument", "idempotency_key")) if (
            isinstance(spec, dict) and not set(spec) - _KEYS
        ) else (None, None)  # fmt: skip
        if not (isinstance(tool, str) and tool and isinstance(argument, str) and argument):
            raise ConfigurationError(f"{path}: the probe of {name!r} is {shape}[{name!r}]")
        found[name] = ProbeTool(tool, argument)
    return found


def probe_answer(
    result: Mapping[str, Any], output_schema: Mapping[str, Any] | None = None
) -> ProbeAnswer:
    """What an upstream probe tool's result says of the effect it was asked about, for a
    tool with ``output_schema`` (or none)."""
    structured = result.get("structuredContent")
    found = structured.get("found") if isinstance(structured, Mapping) else None
    if result.get("isError") or not isinstance(found, bool):
        return CANNOT_TELL
    if not found:
        return NOT_FOUND
    assert isinstance(structured, Mapping)
    own = structured.get("result")
    recorded = dict(own) if isinstance(own, Mapping) and "content" in own else dict(result)
    if output_schema is not None and not _fits(recorded, output_schema):
        log.warning(
            "a probe found the call, but its answer holds no result that fits the tool's "
            "output schema: a person gives it (oncelog resolve ... done --result)"
        )
        return CANNOT_TELL
    return Found(recorded)


def _fits(result: Mapping[str, Any], output_schema: Mapping[str, Any]) -> bool:
    # Installed with mcp, whose clients check results against output schemas with it;
    # imported here so that the config still loads where mcp is missing (its extra's error).
    import jsonschema

    structured = result.get("structuredContent")
    if structured is None:
        return False
    try:
        return bool(jsonschema.Draft202012Validator(output_schema).is_valid(structured))
    except jsonschema.SchemaError:
        return False


def with_probe(
    choice: Choice, probe: ProbeTool | None, ask: Ask, output_schema: Mapping[str, Any] | None
) -> Choice:
    """The choice with its probe (a function the engine calls in the call's worker
    thread: ``ask`` calls the upstream from there); ``output_schema``, the probed tool's."""
    if probe is None or choice.policy is None:
        return choice

    def asked(key: str, arguments: Any) -> ProbeAnswer:
        try:
            result = ask(probe.tool, {probe.key_argument: key}, key)
        except Exception as exc:  # unreachable, or it refused: nobody can tell
            log.warning("probe %s could not be asked: %s", probe.tool, exc)
            return CANNOT_TELL
        return probe_answer(result, output_schema)

    policy = dataclasses.replace(choice.policy, probe=asked)
    return dataclasses.replace(choice, policy=policy)


def check_probes(
    probes: Mapping[str, ProbeTool], chosen: Mapping[str, Choice], listed: Collection[str]
) -> None:
    """Refuse, at the start, a probe of a tool without a kind or naming a tool no
    upstream lists: it would never be asked, and a person would decide instead."""
    for name, probe in probes.items():
        choice = chosen.get(name)
        if choice is None or choice.policy is None or probe.tool not in listed:
            raise ConfigurationError(
                f"the probe of {name!r} is the tool {probe.tool!r}: both must be listed "
                f"by an upstream, and {name!r} must have a kind"
            )
