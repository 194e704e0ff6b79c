"""The alert rules docs/observability.md recommends, evaluated against a scrape.

Only the PromQL those rules use: ``METRIC{LABEL="v", LABEL=~"a|b"}``, optionally inside
``sum(...)`` or ``max(...)``, compared with ``> NUMBER``. Anything else fails loudly, so
a rule the docs change into something this cannot read is noticed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

DOC = Path(__file__).parents[2] / "docs" / "observability.md"
_EXPR = re.compile(r"^(?:(sum|max)\()?(\w+)(?:\{(.*)\})?\)?\s*>\s*([0-9.]+)$")
_MATCHER = re.compile(r'(\w+)\s*(=~|=)\s*"([^"]*)"')


def documented_rules() -> dict[str, str]:
    """Each alert of the docs' YAML block: name -> expression."""
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert block is not None, "docs/observability.md has no alert rules"
    groups: Any = yaml.safe_load(block.group(1))
    return {r["alert"]: r["expr"] for g in groups["groups"] for r in g["rules"]}


def fires(expr: str, samples: Samples) -> bool:
    """Whether ``expr`` holds for these samples (an empty vector never fires)."""
    parsed = _EXPR.match(expr.strip())
    assert parsed is not None, f"cannot evaluate {expr!r}"
    aggregate, metric, matchers, threshold = parsed.groups()
    wanted = _MATCHER.findall(matchers or "")
    values = [
        value
        for (name, labels), value in samples.items()
        if name == metric and all(_matches(dict(labels).get(k, ""), op, v) for k, op, v in wanted)
    ]
    if not values:
        return False
    if aggregate == "sum":
        values = [sum(values)]
    elif aggregate == "max":
        values = [max(values)]
    return any(value > float(threshold) for value in values)


def _matches(value: str, op: str, wanted: str) -> bool:
    return value == wanted if op == "=" else re.fullmatch(wanted, value) is not None
