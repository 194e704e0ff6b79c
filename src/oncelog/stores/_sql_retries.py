"""A person's retry of an effect known not to have happened: a fresh set of attempts with
the same key, written in the caller's transaction, holding the run's row and fencing any
worker still running it. The way out of a step whose retry policy ran out (or that the
provider refused), and of one backing off after an outage: the run goes on from there
at its next start, the steps before it kept."""

from __future__ import annotations

from .._exceptions import NotRetryable, decide_text, resolve_command
from ..records._records import StepRecord, StepState
from ..records._serialization import decode
from ..records._transitions import IN_DOUBT, RETRY
from . import _sql_names as names
from . import _sql_resolutions as resolutions
from ._protocol import OwnerCheck
from ._rows import STEP_COLUMNS, journal_json, number, step_record
from ._rows import text as quoted
from ._sql import NOW, Tx
from ._sql_guards import enters, leaves
from ._sql_tx import append, lock_run


def retry(
    tx: Tx, run_id: str, step_id: str, *, by: str, why: str, force: bool, gone: OwnerCheck
) -> StepRecord:
    """``Store.retry_step``."""
    if not lock_run(tx, run_id):
        raise names.unknown_run(tx, run_id)
    step = resolutions.find_step(tx, run_id, step_id)
    _check_retryable(tx, step)
    overridden = resolutions.live_holder(tx, step, gone, force=force)
    tx.execute(
        "UPDATE runs SET fencing_token = fencing_token + 1, owner = NULL, "
        "lease_expires_at = NULL WHERE run_id = ?",
        (run_id,),
    )
    row = tx.execute(
        f"UPDATE steps SET state = {enters(RETRY)}, attempts = 0, retry_at = NULL "
        f"WHERE run_id = ? AND seq = ? AND {leaves(RETRY)} RETURNING {STEP_COLUMNS}",
        (run_id, step.seq),
    ).fetchone()
    append(
        tx, run_id, step.seq, RETRY.event,
        journal_json(by=quoted(by), why=quoted(why), was=quoted(step.state.value),
                     attempts=number(step.attempts), overrode=quoted(overridden)),
    )  # fmt: skip
    if paused_by(tx, run_id, step.seq) is not None:  # a retry says go: the pause ends
        append(tx, run_id, step.seq, RESUMED, journal_json(by=quoted(by), why=quoted(why)))
    # A run that ended on the refusal is queued again, so a worker (or a restart) takes
    # it; one still running or stopped otherwise keeps its status.
    queued = tx.execute(
        f"UPDATE runs SET status = 'queued', reason = NULL, stopped_by = NULL, "
        f"updated_at = {NOW} WHERE run_id = ? AND status = 'failed' RETURNING run_id",
        (run_id,),
    ).fetchone()
    if queued is not None:
        tx.announce_decision(run_id)
        append(tx, run_id, None, "run_queued", journal_json(by=quoted(by)))
    return step_record(row or ())


def _correct(run_id: str, step_id: str) -> str:
    return resolve_command(run_id, step_id, None, then="not_done", options="--correct --by NAME")


def _check_retryable(tx: Tx, step: StepRecord) -> None:
    """Refuse what a retry could perform twice, naming the command that fits instead."""
    run, q = step.run_id, f"step {step.step_id!r} of run {step.run_id}"
    if step.state in IN_DOUBT:
        why = (
            f"{q} is in doubt ({step.state.value}): it may have happened, and a retry "
            "would send it again. Look it up at the provider (key "
            f"{step.key}), then decide, one of: {decide_text(run, step.step_id, step.attempts)}"
        )
    elif step.state is StepState.DONE:
        why = (
            f"{q} is done: oncelog never performs a done effect again. If the provider "
            "shows it did not happen and a person resolved it done, correct that decision: "
            f"{_correct(run, step.step_id)}"
        )
    elif step.state is StepState.ABANDONED:
        why = (
            f"{q} was abandoned by a person, who did not say whether it happened. Once "
            "the provider shows it did not, correct that decision: "
            f"{_correct(run, step.step_id)}"
        )
    elif tx.execute(
        "SELECT 1 FROM steps WHERE run_id = ? AND seq > ? UNION ALL "
        "SELECT 1 FROM runs WHERE run_id = ? AND status = 'completed'",
        (run, step.seq, run),
    ).fetchone():
        why = (
            f"the run went on past {q} (a later step is recorded, or it completed): its "
            "code handled the refusal, and a retry would change what those steps were "
            "decided on. Start a new run for it"
        )
    else:
        return
    raise NotRetryable(why, run_id=run, step_id=step.step_id, key=step.key)


# The journal records of a person pausing and resuming an effect's retries: the latest of
# them for a step says whether its next attempt may be made.
PAUSED, RESUMED = "retries_paused", "retries_resumed"


def pause(tx: Tx, run_id: str, step_id: str, *, paused: bool, by: str, why: str) -> StepRecord:
    """``Store.pause_retries``: journal a pause (or its end) of the step's retries, holding
    the run's row. A pause is taken by a step that may be attempted again (``not_done``
    or ``failed``); its end by a paused one, which clears the wait before its next attempt
    and queues the run again if the pause halted it, so a worker, a restart or an agent
    waiting in place goes on at once with the same key."""
    if not lock_run(tx, run_id):
        raise names.unknown_run(tx, run_id)
    step = resolutions.find_step(tx, run_id, step_id)
    now = paused_by(tx, run_id, step.seq)
    q = f"step {step.step_id!r} of run {run_id}"
    if paused and now is not None:
        raise NotRetryable(f"{q}: its retries are paused already ({now})",
                           run_id=run_id, step_id=step.step_id, key=step.key)  # fmt: skip
    if not paused and now is None:
        raise NotRetryable(f"{q}: its retries are not paused", run_id=run_id,
                           step_id=step.step_id, key=step.key)  # fmt: skip
    if paused and step.state not in RETRY.sources:
        raise NotRetryable(
            f"{q} is {step.state.value}: only an effect that did not happen (not_done, "
            "failed) has retries to pause", run_id=run_id, step_id=step.step_id, key=step.key,
        )  # fmt: skip
    append(tx, run_id, step.seq, PAUSED if paused else RESUMED,
           journal_json(by=quoted(by), why=quoted(why)))  # fmt: skip
    if not paused:  # the next attempt is made at once, without the rest of its wait
        tx.execute("UPDATE steps SET retry_at = NULL WHERE run_id = ? AND seq = ?",
                   (run_id, step.seq))  # fmt: skip
        queued = tx.execute(
            f"UPDATE runs SET status = 'queued', reason = NULL, stopped_by = NULL, "
            f"updated_at = {NOW} WHERE run_id = ? AND status = 'halted' "
            "AND stopped_by = 'RetriesPaused' RETURNING run_id",
            (run_id,),
        ).fetchone()
        tx.announce_decision(run_id)
        if queued is not None:
            append(tx, run_id, None, "run_queued", journal_json(by=quoted(by)))
    return step


def paused_by(tx: Tx, run_id: str, seq: int) -> str | None:
    """Who paused the step's retries and why, while they are paused; else None."""
    row = tx.execute(
        "SELECT event, data FROM journal WHERE run_id = ? AND seq = ? AND event IN (?, ?) "
        "ORDER BY id DESC LIMIT 1",
        (run_id, seq, PAUSED, RESUMED),
    ).fetchone()
    if row is None or row[0] != PAUSED:
        return None
    data = decode(row[1])
    return f"paused by {data.get('by')}: {data.get('why')}"
