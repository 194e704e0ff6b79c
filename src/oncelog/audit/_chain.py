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

GENESIS = "0" * 64
# What json.dumps(..., ensure_ascii=False, separators=(",", ":")) builds on every call,
# built once: every journal record is hashed through it.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def canonical(run_id: str, seq: int | None, event: str, data: str, at: float) -> str:
    return _CANONICAL.encode([run_id, seq, event, data, at])


def canonical_head(run_id: str, seq: int | None, event: str) -> str:
    """``canonical`` up to its data: a server that writes the data and the time completes
    it (``stores/_postgres_transitions``)."""
    return json.dumps([run_id, seq, event], ensure_ascii=False, separators=(",", ":"))[:-1] + ","


def link(prev: str, run_id: str, seq: int | None, event: str, data: str, at: float) -> str:
    """The hash of a record that follows ``prev``."""
    text = prev + canonical(run_id, seq, event, data, at)
    return hashlib.sha256(text.encode()).hexdigest()


def checkpoint_payload(run_id: str, entries: int, head: str, at: float) -> str:
    """What a checkpoint's signature covers."""
    return json.dumps(["oncelog-checkpoint-1", run_id, entries, head, at], separators=(",", ":"))
