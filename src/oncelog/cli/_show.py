"""``oncelog show``: one run as a person reads it. Its steps, the decisions people took on
it (who, when, note), the kill switches over it, what happens next; with ``--journal``
every record of its journal."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import click

import oncelog
from oncelog.display import (
    StepTiming,
    argument_changes,
    evidence_urls,
    redact,
    step_timings,
    visible,
)

from ._options import db_option, emit, json_option, next_for, opened, say

# The journal records that are a person's (or a detector's) decision about the run.
DECISIONS = {
    "resolved": "resolved",
    "approval_approved": "approved",
    "approval_denied": "denied",
    "approval_edited": "approved edited arguments of",
    "halt_set": "kill switch on",
    "halt_cleared": "kill switch off",
    "budget_set": "budget set",
}
JOURNAL_LIMIT = 1_000_000
SUBJECTS = 10_000  # claims listed beside the steps
# How the intent of a step that took another run's result on its subject begins
# (``StepWrites.adopt_subject``): the rest names that run and step.
TAKEN = "the subject "


def when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def shown(text: str | None, limit: int = 300) -> str:
    """Recorded JSON as a person may see it: credentials masked, cut short."""
    if text is None:
        return "-"
    try:
        value = json.dumps(
            redact(json.loads(text)), ensure_ascii=False, sort_keys=True, separators=(",", ":")
        )
    except ValueError:
        value = f"(not JSON) {text}"
    return value if len(value) <= limit else value[:limit] + f"… ({len(value)} chars)"


def recorded(text: str | None) -> Any:
    """Recorded JSON as a JSON value for ``--json`` (masked), not JSON inside a string."""
    if text is None:
        return None
    try:
        return redact(json.loads(text))
    except ValueError:
        return {"not_json": text}


def run_row(run: oncelog.RunRecord) -> dict[str, Any]:
    """A run for ``--json``: its input a JSON value under ``input``, not a string."""
    row = dataclasses.asdict(run)
    row["input"] = recorded(row.pop("input_json"))
    return {**row, "status": run.status.value}


def step_row(step: oncelog.StepRecord) -> dict[str, Any]:
    """A step for ``--json``: its payloads as JSON values under ``args``, ``result``,
    ``error``."""
    row = step._asdict()
    for field in ("args_json", "result_json", "error_json"):
        row[field.removesuffix("_json")] = recorded(row.pop(field))
    row.update(type=step.type.value, state=step.state.value)
    if step.result is oncelog.NO_RESULT:
        row["no_result"] = True
    return row


def _timed(timing: StepTiming) -> dict[str, Any]:
    """A step's timing for ``--json``: the call's seconds, apart from a wait."""
    return {
        "call_seconds": timing.call, "waited_seconds": timing.waited,
        "settled_by": timing.settled_by,
    }  # fmt: skip


def _decision(entry: oncelog.JournalEntry, steps: dict[int, str]) -> dict[str, Any]:
    data = entry.data
    step = steps.get(entry.seq) if entry.seq is not None else data.get("step_id")
    what = DECISIONS[entry.event]
    if entry.event == "resolved":
        what += f" {data.get('resolution')}"
    decision = {
        "at": entry.at, "event": entry.event, "what": what, "step_id": step,
        "by": data.get("by"), "note": data.get("note") or data.get("reason"),
    }  # fmt: skip
    if entry.event == "approval_edited":
        # What was asked and what was approved, side by side, one parameter a line.
        asked, approved = data.get("args"), data.get("edited_args")
        if isinstance(asked, dict) and isinstance(approved, dict):
            decision["changes"] = argument_changes(redact(asked), redact(approved))
    return decision


def _covering(ledger: oncelog.Ledger, run: oncelog.RunRecord) -> list[oncelog.Halt]:
    """The kill switches on over the run from outside it (its agent's, the global one)."""
    return [
        h for h in ledger.halts(limit=1000)
        if (h.scope is oncelog.HaltScope.AGENT and h.target == run.agent)
        or h.scope is oncelog.HaltScope.GLOBAL
    ]  # fmt: skip


@click.command()
@click.argument("run_id")
@click.option("--journal", "with_journal", is_flag=True, help="Also print the run's journal.")
@db_option
@json_option
def show(run_id: str, with_journal: bool, db: str | None, as_json: bool) -> None:
    """A run: its steps (state, key, attempts, duration, result), the decisions people took
    on it, the kill switches over it, and what happens next."""
    with opened(db, create=False) as ledger:
        run = ledger.get_run(run_id)
        steps = ledger.steps(run_id)
        journal = ledger.journal(run_id, limit=JOURNAL_LIMIT)
        switches = _covering(ledger, run)
        after = next_for(ledger, run_id)
        claims = ledger.subjects(run_id, limit=SUBJECTS)
    ids = {s.seq: s.step_id for s in steps}
    subjects = _subjects(claims, journal)
    timings = step_timings(steps, journal)
    evidence = evidence_urls(journal)
    decisions = [_decision(e, ids) for e in journal if e.event in DECISIONS]
    if as_json:
        out: dict[str, Any] = {
            "run": run_row(run),
            "steps": [
                {
                    **step_row(s),
                    "subject": subjects.get(s.seq),
                    **_timed(timings[s.seq]),
                    "evidence_url": evidence.get(s.step_id),
                }
                for s in steps
            ],
            "decisions": decisions,
            "kill_switches": [{**dataclasses.asdict(h), "scope": h.scope.value} for h in switches],
            "next": after,
        }
        if with_journal:
            out["journal"] = [_journal_row(e) for e in journal]
        emit(out)
        return
    _print_run(run, steps, subjects, timings, evidence)
    _print_decisions(decisions, switches)
    say("next:")
    for line in after:
        say(f"  {line}")
    if with_journal:
        say("journal:")
        for e in journal:
            row = _journal_row(e)
            data = json.dumps(row["data"], ensure_ascii=False, sort_keys=True)
            say(f"  {e.id:>6} {when(e.at)} {'-' if e.seq is None else e.seq:>4} "
                       f"{e.event:<18} {data}")  # fmt: skip


def _journal_row(entry: oncelog.JournalEntry) -> dict[str, Any]:
    data = {k: redact(v) if k in ("args", "result", "error") else v for k, v in entry.data.items()}
    return {"id": entry.id, "at": entry.at, "seq": entry.seq, "event": entry.event, "data": data}


def _subjects(
    claims: list[oncelog.SubjectClaim], journal: list[oncelog.JournalEntry]
) -> dict[int, str]:
    """What each step of the run says about its subject, by position: the subject it
    holds, or, for a step that took another run's result, the journal's word on which run
    and step did it (its intent's reason)."""
    said = {
        e.seq: str(e.data["reason"]) for e in journal
        if e.event == "intent" and e.seq is not None and "subject" not in e.data
        and str(e.data.get("reason") or "").startswith(TAKEN)
    }  # fmt: skip
    said.update((c.seq, f"{c.subject}, held by this step ({c.state.value})") for c in claims)
    return said


def _print_run(
    run: oncelog.RunRecord,
    steps: list[oncelog.StepRecord],
    subjects: dict[int, str],
    timings: dict[int, StepTiming],
    evidence: dict[str, str],
) -> None:
    say(
        f"run {visible(run.run_id)}: {run.status.value}"
        + (f" ({run.reason})" if run.reason else "")
    )
    if run.plan:
        say(f"plan: {', '.join(run.plan)}")
    for s in steps:
        took = "" if s.finished_at is None else f" {timings[s.seq].described()}"
        say(
            f"{s.seq:>4} {visible(s.step_id):<20} {s.type.value:<6} {s.kind:<11} "
            f"{s.state.value:<9} x{s.attempts} {s.key}  {when(s.started_at)}{took}"
        )
        say(f"       arguments: {shown(s.args_json)}")
        if s.seq in subjects:
            say(f"       subject:   {visible(subjects[s.seq])}")
        if s.step_id in evidence:  # where the tool says its effects are looked up
            say(f"       look up:   {visible(evidence[s.step_id])}")
        if s.result_json is not None:
            say(f"       result:    {shown(s.result_json)}")
        elif s.result is oncelog.NO_RESULT:
            say("       result:    oncelog.NO_RESULT (resolved done without it)")
        if s.error_json is not None:
            say(f"       error:     {shown(s.error_json)}")


def _print_decisions(decisions: list[dict[str, Any]], switches: list[oncelog.Halt]) -> None:
    if decisions:
        say("decisions:")
    for d in decisions:
        step = f" {d['step_id']}" if d["step_id"] else ""
        note = f": {d['note']}" if d["note"] else ""
        say(f"  {when(d['at'])} {d['what']}{step} by {d['by']}{note}")
        for line in d.get("changes", []):
            say(f"      {line}")
    for h in switches:
        where = "global" if h.scope is oncelog.HaltScope.GLOBAL else f"agent {h.target}"
        say(f"kill switch on ({where}): {h.reason} (set by {h.set_by} at {when(h.set_at)})")
