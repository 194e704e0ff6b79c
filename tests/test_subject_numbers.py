"""Equal numbers are one subject (issue 41, item 2): ``once_per`` returning ``42`` in one
run and ``42.0`` in another names one refund, not two.

The refunder (``subject_agents/refunder.py``) pays through a provider process that ignores
idempotency keys, so its records count every refund that reached it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog.runtime._subjects import subject_text

from .support.provider_process import running_provider
from .test_attack_subjects import performed, refund


def text_of(*parts: Any) -> str:
    """The subject text of a tool whose ``once_per`` returns ``parts``."""
    spec = oncelog.tool(kind="payment", once_per=lambda: parts)(lambda: None).spec
    return subject_text(spec, {"args": [], "kwargs": {}}, "run", "step")


@pytest.mark.parametrize(
    ("parts", "text"),
    [
        (("refund", 42.0), '["refund",42]'),
        (("refund", 42), '["refund",42]'),
        (("refund", 1e3), '["refund",1000]'),
        (("refund", -0.0), '["refund",0]'),
        (("refund", 0.0), '["refund",0]'),
        (("refund", 2.5), '["refund",2.5]'),
        (("refund", 2**53 - 1.0), f'["refund",{2**53 - 1}]'),
        (("refund", 2**70), f'["refund",{2**70}]'),  # an int is exact at any size
        (("refund", "42"), '["refund","42"]'),  # a string stays a string
        (("refund", True), '["refund",true]'),  # true is not 1
        (("refund", None), '["refund",null]'),
    ],
)
def test_a_subject_is_written_in_one_canonical_form(parts: tuple[Any, ...], text: str) -> None:
    assert text_of(*parts) == text


class Order(int):
    pass


class Name(str):
    pass


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (2.0**53, "one of several integers"),
        (-1e300, "one of several integers"),
        (float("nan"), "a subject is a string"),
        (float("-inf"), "a subject is a string"),
        (Order(42), "a subject is a string"),  # may compare or print as it likes
        (Name("42"), "a subject is a string"),
        (__import__("decimal").Decimal("42"), "a subject is a string"),
        (10**600, "longer than"),
    ],
)
def test_a_number_with_no_one_canonical_form_is_refused(part: Any, said: str) -> None:
    with pytest.raises(oncelog.ConfigurationError, match=said):
        text_of("refund", part)


def test_one_refund_for_42_and_42_point_0_in_two_runs(store_url: str, tmp_path: Path) -> None:
    """Run a refunds order 42 (an int), run b order 42.0 (a float): the provider performs
    one refund; run b sends nothing, and stops for a person since its arguments, as
    recorded, differ from run a's."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        first = refund(store_url, "run-a", provider, "42", "--order-json")
        again = refund(store_url, "run-b", provider, "42.0", "--order-json")
        assert first.returncode == 0, first.stderr
        [answer] = performed(provider, "run-a", "run-b")
        assert provider.requests("run-b") == []
    assert json.loads(first.stdout) == answer
    # Its arguments are not the same text (42.0), so a payment's drift policy asks a person.
    assert again.returncode == 3, again.stderr
    assert "ArgumentDrift: [\"refund\",42] was done by run 'run-a'" in again.stderr
