"""Probes: asking the provider what really happened to an effect whose outcome is unknown.

A tool may declare ``probe=``: a function called, on resume, with the effect's idempotency
key and the arguments it was recorded with, as ``probe(key, *args, **kwargs)``. It answers:

- ``Found(result)``: the provider has it. The effect is recorded done with ``result``, and
  the agent goes on as if the call had answered.
- ``NOT_FOUND``: the provider definitely has no such effect. It is called again with the
  same key, if that key is still valid at the provider (``dedupe_window``); otherwise the run
  halts, because a provider that has forgotten the key would not catch a duplicate.
- ``CANNOT_TELL`` (or an exception): the run halts for a person, with the answer recorded.

A tool may also declare ``preflight=``: called the same way before each attempt (the
first and every retry). ``Found(result)``: recorded done without calling the tool;
``NOT_FOUND``: the tool is called; ``Conflict(reason)``: the provider's state contradicts
the action, the run halts with ``reason`` for a person; ``CANNOT_TELL`` (or an exception):
nothing is sent, the run stops with ``PreflightUnanswered`` (exit 75) and asks again later.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Found:
    """The provider performed the effect; ``result`` is what the call would have returned."""

    result: Any


@dataclass(frozen=True)
class Conflict:
    """A preflight's answer: the provider's state contradicts the action (someone else did
    it, or did the opposite); ``reason`` is the provider's answer, shown to a person."""

    reason: str


class Answer(enum.Enum):
    NOT_FOUND = "not_found"
    CANNOT_TELL = "cannot_tell"


NOT_FOUND = Answer.NOT_FOUND
CANNOT_TELL = Answer.CANNOT_TELL

ProbeAnswer = Found | Answer
Probe = Callable[..., ProbeAnswer]
PreflightAnswer = Found | Answer | Conflict
Preflight = Callable[..., PreflightAnswer]
