"""The shrinker: a failing schedule made as short and plain as it goes on failing.

Greedy, to a fixed point: drop a run, a call, the tail of each script (faults, crashes,
clock steps, decisions), then make each remaining choice the plain one ("ok", no crash,
no clock step, the first decision, each declaration field its default). A candidate is
kept if it still fails the same way (``fails``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from typing import Any

from .schedule import Agent, Declaration, Schedule

_PLAIN: dict[str, Any] = {"faults": "ok", "crashes": None, "ticks": 0, "decisions": 0}


def shrink(schedule: Schedule, fails: Callable[[Schedule], bool], budget: int = 300) -> Schedule:
    """The smallest schedule found that still ``fails``, trying at most ``budget``
    candidates: each pass walks the candidates once, going on from where a kept one was."""
    tries, changed = 0, True
    while changed and tries < budget:
        changed, position = False, 0
        while tries < budget:
            candidates = list(_candidates(schedule))
            if position >= len(candidates):
                break
            tries += 1
            if fails(candidates[position]):
                schedule, changed = candidates[position], True
            else:
                position += 1
    return schedule


def _candidates(s: Schedule) -> Iterator[Schedule]:
    for name in _PLAIN:  # the cheapest wins first: a whole script gone
        if getattr(s, name):
            yield _with(s, name, ())
    for i in range(len(s.agents)):
        if len(s.agents) > 1:
            yield replace(s, agents=s.agents[:i] + s.agents[i + 1 :])
    for i, agent in enumerate(s.agents):
        for j in range(len(agent.calls)):
            if len(agent.calls) > 1:
                calls = agent.calls[:j] + agent.calls[j + 1 :]
                yield replace(s, agents=_put(s.agents, i, replace(agent, calls=calls)))
    for name, plain in _PLAIN.items():
        values: tuple[Any, ...] = getattr(s, name)
        for cut in (0, len(values) // 2, len(values) - 1):
            if cut < len(values):
                yield _with(s, name, values[:cut])
        for i, value in enumerate(values):
            if value != plain:
                yield _with(s, name, (*values[:i], plain, *values[i + 1 :]))
    default = Declaration()
    for field in fields(Declaration):
        if getattr(s.declaration, field.name) != getattr(default, field.name):
            plain = getattr(default, field.name)
            yield replace(s, declaration=replace(s.declaration, **{field.name: plain}))
    if any(agent.period for agent in s.agents):  # periods as few as the runs need
        periods = sorted({agent.period for agent in s.agents})
        again = tuple(replace(a, period=periods.index(a.period)) for a in s.agents)
        if again != s.agents:
            yield replace(s, agents=again)


def _put(agents: tuple[Agent, ...], i: int, agent: Agent) -> tuple[Agent, ...]:
    return (*agents[:i], agent, *agents[i + 1 :])


def _with(s: Schedule, name: str, values: tuple[Any, ...]) -> Schedule:
    changed: Any = {name: values}  # one of the four scripts, each a tuple
    return replace(s, **changed)
