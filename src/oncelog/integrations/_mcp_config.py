"""The declarations an MCP guard reads from its JSON config, shared by ``oncelog
mcp-proxy`` and ``oncelog gateway``: each tool's policy (kind, approval, window,
``once_per`` subject), the default kind, trusted annotations, the run argument, the agent,
the probes (``_mcp_probes``).

A tool's ``once_per`` names the argument fields whose values, after the tool's name, are
the effect's subject; each field's value is taken as the type the tool's input schema
declares for it (``_mcp_subjects``), or as the config declares it (an object
``{"order_id": "integer"}`` instead of the list). A field the schema does not have stops
the guard at its start (``check_subject``).

Nothing here imports MCP: a tool is read through its ``name``, ``input_schema`` and
annotations' three hints.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from oncelog import ConfigurationError

from ._common import Policy
from ._mcp_kinds import Choice, Hints, choose
from ._mcp_probes import ProbeTool, parse_probes
from ._mcp_subjects import TYPES, declared_types, typed

log = logging.getLogger("oncelog")

CONFIG_KEYS = frozenset(
    {"tools", "default_kind", "run_argument", "agent", "trust_annotations", "probes"}
)
_POLICY_KEYS = {"kind", "approval", "dedupe_window", "key_ttl", "once_per", "once_for", "repeat"}


class Annotations(Protocol):
    """The three hints of an MCP ``ToolAnnotations`` the guards read."""

    @property
    def read_only_hint(self) -> bool | None: ...
    @property
    def destructive_hint(self) -> bool | None: ...
    @property
    def idempotent_hint(self) -> bool | None: ...


class Listed(Protocol):
    """What the guards read of a listed MCP ``Tool``."""

    @property
    def name(self) -> str: ...
    @property
    def input_schema(self) -> Any: ...


@dataclass(frozen=True)
class FieldsSubject:
    """A subject the config names: the tool's name and the values of ``fields`` in the
    call's arguments (a function in Python is not JSON)."""

    tool: str
    fields: tuple[str, ...]
    # Each field's declared JSON Schema types (``_mcp_subjects``); empty: not declared.
    types: tuple[tuple[str, ...], ...] = ()

    def __call__(self, **arguments: Any) -> tuple[Any, ...]:
        missing = [name for name in self.fields if name not in arguments]
        if missing:
            # Without the field every such call would claim one subject, and act once.
            raise ConfigurationError(f"the call has no argument {missing[0]!r} of its once_per")
        types = self.types or ((),) * len(self.fields)
        return (self.tool, *(
            typed(self.tool, name, arguments[name], declared)
            for name, declared in zip(self.fields, types, strict=True)
        ))  # fmt: skip


@dataclass(frozen=True)
class ProxyConfig:
    tools: Mapping[str, Policy] = field(default_factory=dict)
    default: Policy | None = None
    run_argument: str | None = None
    agent: str | None = None
    trust_annotations: bool = False
    probes: Mapping[str, ProbeTool] = field(default_factory=dict)  # by the tool they probe

    def choose(self, tool: str, annotations: Annotations | None = None) -> Choice:
        """The policy of ``tool``, given the annotations its server lists, and where the
        policy came from."""
        hints = None if annotations is None else Hints(
            annotations.read_only_hint, annotations.destructive_hint, annotations.idempotent_hint
        )  # fmt: skip
        return choose(
            tool, hints, configured=self.tools.get(tool),
            trusted=self.trust_annotations, default=self.default,
        )  # fmt: skip


def read_json(path: str | Path, what: str) -> dict[str, Any]:
    """The config file's JSON object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the {what} config {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tools", {}), dict):
        raise ConfigurationError(f'{path}: expected {{"tools": {{"TOOL": "KIND", ...}}, ...}}')
    return data


def parse_config(data: Mapping[str, Any], path: str | Path) -> ProxyConfig:
    """The declarations of a config object whose other keys the caller checked."""
    trust = data.get("trust_annotations", False)
    if not isinstance(trust, bool):  # "false" would read as true
        raise ConfigurationError(f"{path}: trust_annotations is true or false, not {trust!r}")
    default = data.get("default_kind")
    return ProxyConfig(
        tools={name: _policy(name, v) for name, v in data.get("tools", {}).items()},
        default=None if default is None else Policy(default),
        run_argument=data.get("run_argument"),
        agent=data.get("agent"),
        trust_annotations=trust,
        probes=parse_probes(data.get("probes", {}), path),
    )


def unknown_settings(data: Mapping[str, Any], path: str | Path, known: frozenset[str]) -> None:
    unknown = set(data) - known
    if unknown:
        raise ConfigurationError(f"{path}: unknown settings {sorted(unknown)}")


def _policy(tool: str, value: Any) -> Policy:
    if isinstance(value, str):
        return Policy(value)  # type: ignore[arg-type]  # Policy checks the kind itself
    if not isinstance(value, dict) or "kind" not in value or set(value) - _POLICY_KEYS:
        unknown = sorted(set(value) - _POLICY_KEYS) if isinstance(value, dict) else []
        raise ConfigurationError(
            f"tool {tool!r}: a kind, or an object with {sorted(_POLICY_KEYS)} and a kind"
            + (f" (unknown: {unknown})" if unknown else "")
        )
    window = value.get("dedupe_window")
    if "key_ttl" in value:
        if window is not None:
            raise ConfigurationError(f"tool {tool!r}: key_ttl is the older name of dedupe_window")
        window = value["key_ttl"]
        log.warning(
            "tool %r: key_ttl is now dedupe_window: an effect in doubt inside it is sent again "
            "with the same key, without a probe or a person; write dedupe_window",
            tool,
        )
    return Policy(
        value["kind"], approval=value.get("approval"), dedupe_window=window,
        once_per=_subject(tool, value.get("once_per")), once_for=value.get("once_for"),
        repeat=value.get("repeat", "replay"),
    )  # fmt: skip


def _subject(tool: str, fields: Any) -> FieldsSubject | None:
    if fields is None:
        return None
    if isinstance(fields, dict):  # the fields' types declared here: {"order_id": "integer"}
        types = tuple(_types_named(named) for named in fields.values())
        wrong = sorted({named for names in types for named in names} - set(TYPES))
        if wrong or not all(types):
            raise ConfigurationError(
                f"tool {tool!r}: once_per declares types {wrong or '[]'}; a field's type is "
                f"one of {list(TYPES)} or a list of them"
            )
    else:
        types = ()
    if not isinstance(fields, (list, dict)) or not fields or not all(
        isinstance(name, str) and name for name in fields
    ):  # fmt: skip
        raise ConfigurationError(
            f'tool {tool!r}: once_per is a list of argument names, e.g. ["customer_id"], '
            'or an object of their types, e.g. {"order_id": "integer"}'
        )
    return FieldsSubject(tool, tuple(fields), types)


def check_subject(tool: Listed, policy: Policy | None) -> None:
    """Refuse a ``once_per`` naming a field the tool does not take: no call would have it."""
    subject = None if policy is None else policy.once_per
    if not isinstance(subject, FieldsSubject):
        return
    known = set((tool.input_schema or {}).get("properties") or {})
    unknown = [name for name in subject.fields if name not in known]
    if unknown:
        raise ConfigurationError(
            f"tool {tool.name!r}: once_per names {unknown}, which its input schema does not "
            f"have (its arguments: {sorted(known)})"
        )


def _types_named(named: Any) -> tuple[str, ...]:
    """A type the config declares, or a list of them, as a tuple of their names."""
    return tuple(map(str, named)) if isinstance(named, list) else (str(named),)


def typed_subject(tool: Listed, choice: Choice) -> Choice:
    """The choice with its subject's fields typed as the config, else the tool's input
    schema, declares them."""
    policy = choice.policy
    subject = None if policy is None else policy.once_per
    if policy is None or not isinstance(subject, FieldsSubject) or subject.types:
        return choice
    found = tuple(declared_types(tool.input_schema, name) for name in subject.fields)
    return dataclasses.replace(
        choice,
        policy=dataclasses.replace(policy, once_per=dataclasses.replace(subject, types=found)),
    )
