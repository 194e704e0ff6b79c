"""The SQL of result contracts: what a person's result for a tool must look like when
they resolve one of its effects as done.

The journal is the evidence of a contract: each declaration that changes a tool's
contract is journalled (``result_declared``, outside any run) in the transaction that
writes its row, and ``resolve`` checks a person's result against the last one journalled,
never against the row alone, so a contract loosened in the table behind the ledger's back
lets no result through that the declared one refuses. A ledger whose contracts were
declared before they were journalled has only the row until the tool declares its
contract again (any process that uses the tool does).
"""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

from .._exceptions import CorruptRecord
from ..records._serialization import decode
from ._rows import journal_json
from ._rows import text as quoted
from ._sql import NOW, Tx
from ._sql_tx import append

_GLOBAL = ""  # the journal's run id of records outside any run


def declare(tx: Tx, tool: str, contract_json: str) -> None:
    """``Store.set_result_contract`` (every process declares its tools' contracts as it
    uses them: most declarations write nothing)."""
    tx.lock_journal(_GLOBAL)  # declarers one at a time: the last journalled is the row's
    with suppress(CorruptRecord):  # a malformed record is declared over
        if _journalled(tx, tool) == decode(contract_json):
            return
    tx.execute(
        "INSERT INTO result_contracts (tool, contract, updated_at) "
        f"VALUES (?, ?, {NOW}) ON CONFLICT (tool) DO UPDATE SET "
        f"contract = excluded.contract, updated_at = {NOW}",
        (tool, contract_json),
    )
    append(tx, _GLOBAL, None, "result_declared",
           journal_json(tool=quoted(tool), contract=contract_json))  # fmt: skip


def contract(tx: Tx, tool: str) -> str | None:
    """``Store.result_contract``, in the caller's read."""
    journalled = _journalled(tx, tool)
    if journalled is not _NONE:
        return json.dumps(journalled)
    row = tx.execute("SELECT contract FROM result_contracts WHERE tool = ?", (tool,)).fetchone()
    return None if row is None else str(row[0])


_NONE = object()  # no contract of the tool journalled


def _journalled(tx: Tx, tool: str) -> Any:
    """The last contract journalled for ``tool``, decoded, or ``_NONE``; ``CorruptRecord``
    if that record holds none (its broken link is verify's to report): a person's result
    is then refused rather than checked against the row."""
    row = tx.execute(
        "SELECT data FROM journal WHERE run_id = ? AND event = 'result_declared' "
        f"AND {tx.dialect.json_text('data', 'tool')} = ? ORDER BY id DESC LIMIT 1",
        (_GLOBAL, tool),
    ).fetchone()
    if row is None:
        return _NONE
    try:
        contract = decode(row[0])["contract"]
    except (ValueError, KeyError, TypeError):
        contract = None
    if not isinstance(contract, dict):
        raise CorruptRecord(
            f"the journal's last result contract of tool {tool!r} is malformed: the journal "
            "was edited (oncelog verify says where)"
        )
    return contract
