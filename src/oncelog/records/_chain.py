"""The journal's hash chain: each record's hash covers the one before it in its run.

``hash = sha256(prev_hash + head + data)``, where ``head`` is the JSON array ``[run_id,
seq, event, at]`` and ``data`` the record's JSON text exactly as stored, appended as it is
(rule 2, issue 42): the data is hashed over the text already encoded, never
quoted again. The head is a JSON array, which ends at its first ``]`` outside a string, so
the text still says where the head ends and the data begins. Records written before rule
2 hashed ``prev_hash + [run_id, seq, event, data, at]``, their data quoted as a JSON
string (rule 1, ``link_rule_1``); ``follows`` accepts either, and no text of one rule is a
text of the other (after the event, rule 1 has a string and rule 2 a number), so a record
cannot pass under the rule it was not written with.

The first record of a run follows ``GENESIS``. A run's records chain in journal-id order;
records outside any run (global and agent controls) chain under the run id ``""``. An
edited, deleted, inserted or reordered record breaks the chain at that record; a truncated
tail does not, so checkpoints (``_checkpoints``) record a chain's length and head, signed.
"""

from __future__ import annotations

import hashlib
import json
from json.encoder import encode_basestring as _quote  # the C escaper of ensure_ascii=False

GENESIS = "0" * 64
# What json.dumps(..., ensure_ascii=False, separators=(",", ":")) builds on every call,
# built once: a record whose fields are not of the usual types is hashed through it.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_sha256 = hashlib.sha256


def head(run_id: str, seq: int | None, event: str, at: float) -> str:
    """A record's fields other than its data, as rule 2 hashes them before the data."""
    # Every journal append hashes one: the usual field types are spliced as the encoder
    # would write them (a finite float is its repr), without the encoder's Python layers.
    if type(at) is float and -1e308 < at < 1e308 and type(seq) in (int, type(None)):
        return (
            f"[{_quote(run_id)},{'null' if seq is None else int.__repr__(seq)},"
            f"{_quote(event)},{float.__repr__(at)}]"
        )
    return _CANONICAL.encode([run_id, seq, event, at])


def canonical_head(run_id: str, seq: int | None, event: str) -> str:
    """``head`` up to its time: a server that writes the time completes it with the time's
    text and ``]``, then the data (``stores/_postgres_transitions``)."""
    if type(seq) in (int, type(None)):  # as ``head`` splices it
        return f"[{_quote(run_id)},{'null' if seq is None else int.__repr__(seq)},{_quote(event)},"
    return _CANONICAL.encode([run_id, seq, event])[:-1] + ","


def link(prev: str, run_id: str, seq: int | None, event: str, data: str, at: float) -> str:
    """The hash of a record that follows ``prev`` (rule 2): one hash over the data's text
    as stored, behind the record's head."""
    # ``head``'s splice, inline: every journal append calls this.
    if type(at) is float and -1e308 < at < 1e308 and type(seq) in (int, type(None)):
        text = (
            f"{prev}[{_quote(run_id)},{'null' if seq is None else int.__repr__(seq)},"
            f"{_quote(event)},{float.__repr__(at)}]{data}"
        )
    else:
        text = prev + head(run_id, seq, event, at) + data
    return _sha256(text.encode()).hexdigest()


def canonical(run_id: str, seq: int | None, event: str, data: str, at: float) -> str:
    """Rule 1's record: ``[run_id, seq, event, data, at]``, the data quoted as a string."""
    if type(at) is float and -1e308 < at < 1e308 and type(seq) in (int, type(None)):
        return (
            f"[{_quote(run_id)},{'null' if seq is None else int.__repr__(seq)},"
            f"{_quote(event)},{_quote(data)},{float.__repr__(at)}]"
        )
    return _CANONICAL.encode([run_id, seq, event, data, at])


def link_rule_1(prev: str, run_id: str, seq: int | None, event: str, data: str, at: float) -> str:
    """The hash a record written before rule 2 has (verified, never written any more)."""
    return _sha256((prev + canonical(run_id, seq, event, data, at)).encode()).hexdigest()


def follows(
    prev: str, run_id: str, seq: int | None, event: str, data: str, at: float, stored: str
) -> bool:
    """Whether ``stored`` is the hash of this record after ``prev``, by either rule."""
    try:
        return stored == link(prev, run_id, seq, event, data, at) or (
            stored == link_rule_1(prev, run_id, seq, event, data, at)
        )
    except (UnicodeEncodeError, TypeError, ValueError):
        return False  # a field no store could have written (a lone surrogate, a stray type)


def checkpoint_payload(run_id: str, entries: int, head: str, at: float) -> str:
    """What a checkpoint's signature covers."""
    return json.dumps(["oncelog-checkpoint-1", run_id, entries, head, at], separators=(",", ":"))
