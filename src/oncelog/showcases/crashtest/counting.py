"""What the provider performed, as ``--count CMD`` prints it: a number (every effect the
agent's provider performed so far) or a JSON object of counts per tool. A trial's count
is the difference between what the command printed before it and after it, so that a
provider keeping the effects of earlier trials still counts one trial's alone."""

from __future__ import annotations

import json

from .errors import NotTestable

# The key a bare number is kept under: the command counted every tool together.
ALL_TOOLS = "*"
Counts = dict[str, int]


def parse(printed: str, command: str) -> Counts:
    text = printed.strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return {ALL_TOOLS: value}
    if isinstance(value, dict) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value.values()
    ):
        return {str(tool): n for tool, n in value.items()}
    shown = text[-200:] or "(nothing)"
    raise NotTestable(
        f"the --count command must print a number, or a JSON object of counts per tool "
        f'({{"send_email": 2}}); {command} printed: {shown}'
    )


def performed(before: Counts, after: Counts) -> Counts:
    """What was performed between two counts."""
    return {tool: n - before.get(tool, 0) for tool, n in after.items() if n > before.get(tool, 0)}


def beyond(
    performed: Counts, clean: Counts, accepted: frozenset[str]
) -> dict[str, tuple[int, int]]:
    """The tools a trial performed more times than the run without crashes did, as
    (this trial's count, the clean run's); ``accepted`` tools' re-runs are harmless."""
    return {
        tool: (n, clean.get(tool, 0))
        for tool, n in performed.items()
        if n > clean.get(tool, 0) and tool not in accepted
    }
