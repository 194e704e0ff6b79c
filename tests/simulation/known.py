"""Families of findings that are known bugs, each recognised from the outcome itself, so
that CI can tolerate them until their fixes merge (``tests/test_simulation.KNOWN``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from .driver import Outcome
from .oracle import Finding


@dataclass(frozen=True)
class Known:
    """A known bug: the issue item that names it, and whether a finding is one of it."""

    item: str
    matches: Callable[[Outcome, Finding], bool]


def _periods_share_a_key(outcome: Outcome, finding: Finding) -> bool:
    """A step of one period recorded done with another period's effect, found under the
    key they share (a key derived from the subject alone)."""
    return finding.family == "lost" and any(
        item.key in finding.keys and item.op[0] == finding.op[0] and item.op[1] != finding.op[1]
        for item in outcome.items
    )


def _equal_numbers_split(outcome: Outcome, finding: Finding) -> bool:
    """One subject performed once under each of several keys, the calls differing only in
    how a number was written (42 and 42.0)."""
    if finding.family != "twice":
        return False
    mine = [item for item in outcome.items if item.op == finding.op]
    once_per_key = all(n == 1 for n in Counter(item.key for item in mine).values())
    return once_per_key and len({item.subject for item in mine}) > 1


ISSUE_41_ITEM_1 = Known("issue 41 item 1: a periodic effect lost to its own last period",
                        _periods_share_a_key)  # fmt: skip
ISSUE_41_ITEM_2 = Known("issue 41 item 2: equal numbers make two subjects", _equal_numbers_split)


def unknown(outcome: Outcome, findings: list[Finding], known: list[Known]) -> list[Finding]:
    """The findings that no known bug accounts for."""
    return [f for f in findings if not any(bug.matches(outcome, f) for bug in known)]
