"""``oncelog.display``: what an agent recorded, made fit to show a person: credentials
masked, wherever they sit, and nothing else. Declared secrets (``tool(secret=...)``)
never reach the ledger at all (they are stored as ``redacted:<hmac>``); this is the second
line, for what nobody declared: the CLI and the console show recorded payloads only
through it, and so can a page or a report of your own.

A person reading a run needs its numbers: token counts (``usage``, ``prompt_tokens``,
``max_tokens``), amounts, ids. So a value is masked only if it sits under a key that names
a credential (``password``, ``api_key``, ``access_token``, ``card_number``...; a count of
``tokens`` is not one), or is text with a credential's shape wherever it sits (a Stripe or
GitHub key, a bearer header, a JWT, a private key), or is a payment card number (13 to 19
digits passing the Luhn check, as text or as a number). Other numbers are always shown.

The arguments of an approval request are the exception: a person approves exactly what
they read, so those are shown whole and unmasked (``exact_json``; declared secrets are
keyed hashes already), and ids as they are stored (``visible``).

On a terminal or in a log, text from the ledger is printed through ``printable``, and a
command for a person to paste is built by ``oncelog_command``, which quotes its ids for
the shell; ``decide_commands`` gives the three ``oncelog resolve`` commands of an effect in
doubt (``decide_text`` in one line), each accepted as it pastes. ``step_timings`` tells a
step's time at its provider from its wait for a person or a restart, which are shown
apart. ``evidence_urls`` reads from a run's journal where each of its effects is looked up
at the provider (``tool(evidence_url=...)``). ``argument_changes`` lists what a person's edit
of an approval's arguments changed, one line per parameter. ``install_line`` is the
``pip install`` that adds an extra to the oncelog that runs (its checkout, or its wheel)."""

from __future__ import annotations

from ._extras import install_line
from .records._argument_edits import argument_changes
from .records._display import (
    DECISIONS,
    MASK,
    decide_commands,
    decide_text,
    escape_invisible,
    exact_json,
    oncelog_command,
    printable,
    redact,
    resolve_command,
    visible,
)
from .records._evidence_url import evidence_urls
from .records._timings import StepTiming, step_timings

__all__ = [
    "DECISIONS", "MASK", "StepTiming", "argument_changes", "decide_commands", "decide_text",
    "escape_invisible", "evidence_urls", "exact_json", "install_line", "oncelog_command",
    "printable", "redact", "resolve_command", "step_timings", "visible",
]  # fmt: skip
