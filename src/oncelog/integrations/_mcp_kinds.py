"""Which kind the MCP proxy gives each of its server's tools, and where it came from.

The config always wins: a tool it names in ``tools`` has that policy. For the others, a
server the config trusts (``"trust_annotations": true``) proposes a kind through the
tool's annotations; then ``default_kind``; else the tool has no kind, and the proxy does
not offer it. The hints of a server the config does not trust are never read: the MCP
specification says a client must treat them as untrusted unless they come from a trusted
server, and a lying server could otherwise make its own payment a ``read``.

The annotations are read with the specification's defaults for a hint left out
(``readOnlyHint`` false, ``destructiveHint`` true, ``idempotentHint`` false), so an
annotation that says nothing about effects proposes ``destructive``, which waits for a
person. A tool without any annotations proposes nothing.

A config that names a milder kind than a tool's annotations propose still wins, trusted
server or not, but the choice carries the stronger kind so the proxy can say so: reading
the hints of an untrusted server for a warning is safe, since a warning never makes a tool
milder.

Nothing here imports MCP: a tool's annotations come as its three hints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from oncelog import KindName

from ._common import Policy

Source = Literal["config", "annotation", "default"]

# How much a kind lets happen without a person: a config below the annotations' is warned of.
_REACH: dict[str, int] = {"read": 0, "upsert": 1, "create": 2, "payment": 3, "destructive": 3}


@dataclass(frozen=True)
class Hints:
    """A tool's ``readOnlyHint``, ``destructiveHint`` and ``idempotentHint``; None where
    the server left one out."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None

    def kind(self) -> KindName:
        if self.read_only is True:
            return "read"
        if self.destructive is False:  # left out, it means destructive
            return "upsert" if self.idempotent is True else "create"
        return "destructive"


@dataclass(frozen=True)
class Choice:
    """A tool's policy and where it came from; ``policy`` None: the tool is not offered."""

    tool: str
    policy: Policy | None
    source: Source | None
    hints: Hints | None = None  # what a trusted server said, when the kind came from it
    # The kind the server's annotations propose, where the config chose a milder one.
    annotated: KindName | None = None

    @property
    def waits_for_a_person(self) -> bool:
        if self.policy is None:
            return False
        if self.policy.approval is not None:
            return self.policy.approval
        return self.policy.kind == "destructive"


def choose(
    tool: str,
    hints: Hints | None,
    *,
    configured: Policy | None,
    trusted: bool,
    default: Policy | None,
) -> Choice:
    """The policy of ``tool``: the config's, a trusted server's proposal, or the default."""
    if configured is not None:
        return Choice(tool, configured, "config", annotated=_stronger(hints, configured))
    if trusted and hints is not None:
        return Choice(tool, Policy(hints.kind()), "annotation", hints)
    if default is not None:
        return Choice(tool, default, "default")
    return Choice(tool, None, None)


def _stronger(hints: Hints | None, configured: Policy) -> KindName | None:
    """The kind ``hints`` propose, if it reaches further than the configured one."""
    if hints is None:
        return None
    proposed = hints.kind()
    configured_kind = str(getattr(configured.kind, "value", configured.kind))
    return proposed if _REACH[proposed] > _REACH.get(configured_kind, 3) else None
