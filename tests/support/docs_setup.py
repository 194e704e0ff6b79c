"""What a block of ``docs/`` marked ``<!-- runs after the docs' setup -->`` takes from
elsewhere, stood in: ``tests/test_docs.py`` runs this text, then the block, as one program,
in a folder of its own whose temporary ledger ``ONCELOG_URL`` names. The stand-ins never
reach a real provider or model: the blocks declare tools and agents, and call none."""

import json  # noqa: F401  (the blocks use it without importing it)
import os
from datetime import timedelta  # noqa: F401

import oncelog

# A key for ``oncelog.open(redaction_key=os.environ[...])``, and one for a model client
# that is built and never called.
os.environ.setdefault("ONCELOG_REDACTION_KEY", "a key the docs' examples share, 32 bytes+")
os.environ.setdefault("OPENAI_API_KEY", "unused")

ledger = oncelog.open()


class CardDeclined(Exception):
    """A provider's refusal: it did not act."""


def agent() -> None:
    """An agent's main function, as ``oncelog.run_main`` calls it."""


def page_someone(message: str) -> None:
    """A pager."""


@oncelog.tool(kind="payment")
def charge(customer: str, cents: int, *, idempotency_key: str) -> dict[str, object]:
    return {"customer": customer, "cents": cents}


@oncelog.tool(kind="create")
def send_email(to: str, body: str, *, idempotency_key: str) -> dict[str, object]:
    return {"to": to}
