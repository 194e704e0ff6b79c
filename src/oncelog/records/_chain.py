"""The journal's hash chain: each record's hash covers the one before it in its run.

``hash = sha256(prev_hash + canonical record)``, where the canonical record is the JSON
array ``[run_id, seq, event, data, at]`` (``data`` the record's JSON text as stored) and
the first record of a run follows ``GENESIS``. A run's records chain in journal-id order;
records outside any run (global and agent controls) chain under the run id ``""``. An edited,
deleted, inserted or reordered record breaks the chain at that record; a truncated tail
does not, so checkpoints (``_checkpoints``) record a chain's length and head, signed.
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


def canonical(run_id: str, seq: int | None, event: str, data: str, at: float) -> str:
    # Every journal append hashes one: the usual field types are spliced as the encoder
    # would write them (a finite float is its repr), without the encoder's Python layers.
    if type(at) is float and -1e308 < at < 1e308 and type(seq) in (int, type(None)):
        return (
            f"[{_quote(run_id)},{'null' if seq is None else int.__repr__(seq)},"
            f"{_quote(event)},{_quote(data)},{float.__repr__(at)}]"
        )
    return _CANONICAL.encode([run_id, seq, event, data, at])


def canonical_head(run_id: str, seq: int | None, event: str) -> str:
    """``canonical`` up to its data: a server that writes the data and the time completes
    it (``stores/_postgres_transitions``)."""
    if type(seq) in (int, type(None)):  # as ``canonical`` splices it
        return f"[{_quote(run_id)},{'null' if seq is None else int.__repr__(seq)},{_quote(event)},"
    return _CANONICAL.encode([run_id, seq, event])[:-1] + ","


def link(prev: str, run_id: str, seq: int | None, event: str, data: str, at: float) -> str:
    """The hash of a record that follows ``prev``."""
    # ``canonical``'s splice, inline: every journal append (two per live step) calls this.
    if type(at) is float and -1e308 < at < 1e308 and type(seq) in (int, type(None)):
        text = (
            f"{prev}[{_quote(run_id)},{'null' if seq is None else int.__repr__(seq)},"
            f"{_quote(event)},{_quote(data)},{float.__repr__(at)}]"
        )
    else:
        text = prev + canonical(run_id, seq, event, data, at)
    return _sha256(text.encode()).hexdigest()


def checkpoint_payload(run_id: str, entries: int, head: str, at: float) -> str:
    """What a checkpoint's signature covers."""
    return json.dumps(["oncelog-checkpoint-1", run_id, entries, head, at], separators=(",", ":"))
