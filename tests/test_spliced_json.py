"""Texts the hot path splices by hand are, byte for byte, what the json module writes.

The hash chain, the idempotency key, the journal entries of an intent, an outcome and a
step recorded after it ran, and every canonical payload are built without
``JSONEncoder``'s Python layers. A hash or a key that came out one character different
would break every recorded chain or deduplication, so each is compared here with the
encoder it replaces, on awkward values.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import pytest

from oncelog._exceptions import UnserializableValue
from oncelog.records._chain import (
    GENESIS,
    canonical,
    canonical_head,
    follows,
    head,
    link,
    link_rule_1,
)
from oncelog.records._records import StepState, StepType
from oncelog.records._serialization import digest, encode
from oncelog.runtime._calls import idempotency_key
from oncelog.stores._protocol import Lease, NewStep, Outcome
from oncelog.stores._rows import journal_json, number, text
from oncelog.stores._shared import intent_json, outcome_json, recorded_json

NAMES = ["a", "é€", 'x"y\\z', "\u2028", "tab\t", "😀", "a b", "\x00", "\ud800"]
TIMES = [0.0, -0.0, 1.5, 1e20, 1764612345.123456, 1e-300, 5, True, 1.7e308]
TIMES += [float("nan"), float("inf"), -float("inf")]
SEQS: list[Any] = [None, 0, 12, 10**30, True]
CHAIN = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def test_the_chain_record_is_what_the_encoder_writes() -> None:
    for name, seq, at in itertools.product(NAMES, SEQS, TIMES):
        data = '{"a":"é"}' + name
        assert canonical(name, seq, "intent", data, at) == CHAIN.encode(
            [name, seq, "intent", data, at]
        )
        start = CHAIN.encode([name, seq, "outcome"])[:-1] + ","
        assert canonical_head(name, seq, "outcome") == start
        assert head(name, seq, "intent", at) == CHAIN.encode([name, seq, "intent", at])


def test_the_chain_link_hashes_what_the_encoder_writes() -> None:
    """Rule 2: the head as the encoder writes it, then the data's text as it is; rule 1
    (still verified): the whole record as the encoder writes it, the data quoted."""
    for name, seq, at in itertools.product(NAMES, SEQS, TIMES):
        data = '{"a":"é"}' + name
        text = GENESIS + CHAIN.encode([name, seq, "intent", at]) + data
        old = GENESIS + CHAIN.encode([name, seq, "intent", data, at])
        try:
            expected = hashlib.sha256(text.encode()).hexdigest()
            before = hashlib.sha256(old.encode()).hexdigest()
        except UnicodeEncodeError:  # a lone surrogate: no store holds it, nothing hashes it
            with pytest.raises(UnicodeEncodeError):
                link(GENESIS, name, seq, "intent", data, at)
            assert not follows(GENESIS, name, seq, "intent", data, at, "0" * 64)
            continue
        assert link(GENESIS, name, seq, "intent", data, at) == expected
        assert link_rule_1(GENESIS, name, seq, "intent", data, at) == before
        assert follows(GENESIS, name, seq, "intent", data, at, expected)
        assert follows(GENESIS, name, seq, "intent", data, at, before)
        assert not follows(GENESIS, name, seq, "outcome", data, at, expected)


def test_the_idempotency_key_hashes_what_json_dumps_writes() -> None:
    for run, step, namespace in itertools.product(NAMES, NAMES, ["", "ns", "é"]):
        parts = [run, step, "tool"] if not namespace else [namespace, run, step, "tool"]
        expected = "ol1_" + digest(json.dumps(parts))[:40]
        assert idempotency_key(run, step, "tool", namespace) == expected


def test_known_idempotency_keys_stay_as_they_are() -> None:
    # Providers deduplicate on keys already sent: no change of the code may change one.
    assert (
        idempotency_key("run-1", "s1", "charge") == "ol1_ca85550063120636e627bbe3d186d05ae10489bb"
    )
    assert (
        idempotency_key("run-1", "charge@3", "charge", "billing")
        == "ol1_e159b35381088f965be5b4663cdf633e83090fbd"
    )
    assert idempotency_key("é€", 'x"y', "t\\") == "ol1_fb234d302b58e27a55a5491d6be2fee8728910db"


def _intent_by_journal_json(
    lease: Lease, step: NewStep, reason: str | None, approval: int | None
) -> str:
    used = {} if approval is None else {"approval": str(approval)}
    return journal_json(
        step_id=text(step.step_id), type=text(step.type.value), tool=text(step.tool),
        kind=text(step.kind), key=text(step.key), args_hash=text(step.args_hash),
        args=step.args_json, attempt="2", token=str(lease.token), reason=text(reason),
        cost=number(step.cost), irreversible="true" if step.irreversible else "false", **used,
    )  # fmt: skip


@pytest.mark.parametrize("step_type", list(StepType))
def test_an_intent_entry_is_journal_json_in_sorted_order(step_type: StepType) -> None:
    for step_id, cost, irreversible, reason, approval, token in itertools.product(
        ['s1', 'é"x'], [0.0, 1.5, 3], [True, False], [None, 'why "é"'],
        [None, 7], [1, 99],
    ):  # fmt: skip
        lease = Lease("r", "o", token, 30.0)
        step = NewStep(
            4, step_id, step_type, "tool\\", "create", "ol1_x", "abc", '{"args":[],"kwargs":{}}',
            cost=cost, irreversible=irreversible,
        )  # fmt: skip
        expected = _intent_by_journal_json(lease, step, reason, approval)
        assert intent_json(lease, step, 2, reason, approval) == expected


@pytest.mark.parametrize("state", list(StepState))
def test_an_outcome_entry_is_journal_json_in_sorted_order(state: StepState) -> None:
    for result, error, tokens_in, cost, retry_at in itertools.product(
        [None, '{"a":1}'], [None, '{"e":"x"}'], [0, 10], [None, 0.25, 2], [None, 1764612345.5]
    ):
        outcome = Outcome(state, result, error, tokens_in, 5, cost, retry_at)
        retry = {} if retry_at is None else {"retry_at": number(retry_at)}
        expected = journal_json(
            state=text(state.value), attempt="3", result=result, error=error,
            tokens_in=str(tokens_in), tokens_out="5",
            cost=None if cost is None else number(cost), **retry,
        )  # fmt: skip
        assert outcome_json(outcome, 3) == expected


@pytest.mark.parametrize("state", list(StepState))
def test_a_recorded_entry_is_journal_json_in_sorted_order(state: StepState) -> None:
    """The one entry of a step recorded after it ran: the intent's fields and the
    outcome's, the outcome's cost as ``settled_cost``, and the call's ``elapsed_us``."""
    for step_id, cost, settled, result, error, retry_at, elapsed, approval in itertools.product(
        ['s1', 'é"x'], [0.0, 1.5, 3], [None, 0.25], [None, '{"a":1}'],
        [None, '{"e":"x"}'], [None, 1764612345.5], [0.0, 1.25e-05, 2, 3.2e-7, 7.5e-7], [None, 7],
    ):  # fmt: skip
        lease = Lease("r", "o", 12, 30.0)
        step = NewStep(
            4, step_id, StepType.LLM, "tool\\", "llm", "ol1_x", "abc", '{"args":[],"kwargs":{}}',
            cost=cost, irreversible=step_id == "s1", elapsed=elapsed,
        )  # fmt: skip
        outcome = Outcome(state, result, error, 10, 5, settled, retry_at)
        fields = {
            "step_id": text(step.step_id), "type": text(step.type.value), "tool": text(step.tool),
            "kind": text(step.kind), "key": text(step.key), "args_hash": text(step.args_hash),
            "args": step.args_json, "attempt": "2", "token": "12", "reason": None,
            "cost": number(cost), "irreversible": "true" if step.irreversible else "false",
            "elapsed_us": str(round(elapsed * 1e6)), "state": text(state.value), "result": result,
            "error": error, "tokens_in": "10", "tokens_out": "5",
            "settled_cost": None if settled is None else number(settled),
        }  # fmt: skip
        if retry_at is not None:
            fields["retry_at"] = number(retry_at)
        if approval is not None:
            fields["approval"] = str(approval)
        assert recorded_json(lease, step, 2, outcome, approval) == journal_json(**fields)


def test_payloads_are_what_json_dumps_writes_and_refuses() -> None:
    def dumps(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    for value in [{"b": 1, "a": [1, 2.5, "é", None, True]}, "x\u2028", 3, 1.0, [], {}]:
        assert encode(value, what="v", limit=1 << 20) == dumps(value)
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(UnserializableValue, match="nested more than"):  # as it always was
        encode(circular, what="v", limit=1 << 20)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_number_json_cannot_hold_is_refused_not_spliced(value: float) -> None:
    """JSON has no text for NaN or an infinity: an entry holding one would not decode."""
    with pytest.raises(UnserializableValue):
        number(value)
    with pytest.raises(UnserializableValue):
        encode({"cost": value}, what="v", limit=1 << 20, exact=False)
