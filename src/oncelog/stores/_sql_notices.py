"""The SQL of telling people that a run needs them: each notice is journalled under its
run before it is delivered, and its delivery after, so a notice is delivered at least
once (a crash between the two delivers it again) and never again once confirmed. Each
function runs inside its caller's transaction."""

from __future__ import annotations

from ._rows import journal_json, text
from ._sql import Tx
from ._sql_tx import append

NEEDED = "person_needed"
NOTIFIED = "person_notified"
WAITING = "waiting_for_person"


def record_notice(tx: Tx, run_id: str, notice_id: str, data_json: str) -> bool:
    """``Store.record_notice``, in the caller's transaction."""
    tx.lock_journal(run_id)
    rows = tx.execute(
        "SELECT event FROM journal WHERE run_id = ? AND event IN (?, ?) "
        f"AND {tx.dialect.json_text('data', 'id')} = ?",
        (run_id, NEEDED, NOTIFIED, notice_id),
    ).fetchall()
    seen = {row[0] for row in rows}
    if NOTIFIED in seen:
        return False
    if NEEDED not in seen:
        append(tx, run_id, None, NEEDED, data_json)
    return True


def confirm_notice(tx: Tx, run_id: str, notice_id: str) -> None:
    append(tx, run_id, None, NOTIFIED, journal_json(id=text(notice_id)))


def record_waiting(tx: Tx, run_id: str, data_json: str) -> None:
    """``Store.record_waiting``, in the caller's transaction."""
    append(tx, run_id, None, WAITING, data_json)
