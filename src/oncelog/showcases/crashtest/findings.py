"""What a trial's ledger shows went wrong, each with the fix.

- an effect attempted again while its previous attempt's outcome was unknown, with
  neither a probe nor a person saying it had not happened (``ran_twice``);
- a run the killed process left unfinished that no restarted process entered again: its
  run id was made at process start (``run_id_at_start``);
- a restarted process asking, at a recorded position, for the same tool under another
  step id (``step_ids_change``), or for another step altogether (``replay_diverged``);
- with ``--count``, a tool the provider performed more often than in the run without
  crashes (``performed_twice``), whatever the ledger says.

The ledger also shows which recoveries relied on a declared ``dedupe_window`` or on a
probe's answer rather than on what the provider showed (``recoveries``): only a count at
the provider can tell whether they were right.
"""

from __future__ import annotations

import ast
import enum
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import oncelog

from .counting import ALL_TOOLS
from .evidence import Evidence


class Kind(str, enum.Enum):
    RAN_TWICE = "ran_twice"
    RUN_ID_AT_START = "run_id_at_start"
    STEP_IDS_CHANGE = "step_ids_change"
    REPLAY_DIVERGED = "replay_diverged"
    AGENT_FAILED = "agent_failed"
    PERFORMED_TWICE = "performed_twice"


class Reliance(str, enum.Enum):
    """What a recovery took the provider's word from, instead of the provider's records."""

    WINDOW = "dedupe_window"  # sent again with the same key, trusting the provider dedupes
    PROBE = "probe"  # the probe's answer: found (recorded done) or not found (sent again)


FIXES = {
    Kind.RAN_TWICE: (
        "if {tool!r} is not a true upsert at its provider (a second call with the same "
        "idempotency key makes a second thing), declare it kind='create', with a probe if "
        "the provider can be asked; if it is one, accept its re-runs with --idempotent {tool}"
    ),
    Kind.RUN_ID_AT_START: (
        "take the run id from outside the process, so that a restarted process resumes the "
        "same run: under crashtest $ONCELOG_RUN_ID (or {run_id} in the command's arguments), "
        "in production the Job name, the queue message id or the ticket id; never a uuid or "
        "a timestamp made at start"
    ),
    Kind.STEP_IDS_CHANGE: (
        "give every step an id that is the same in every attempt: take it from the stored "
        "plan (ledger.run(run_id, plan=[...]), run.plan) or pass None to use its position; "
        "never a counter, a timestamp or a name a model makes up after a restart"
    ),
    Kind.REPLAY_DIVERGED: (
        "make the agent take the same steps when it replays: its choices may depend only on "
        "recorded results; record the time, random draws and other inputs with run.read"
    ),
    Kind.AGENT_FAILED: (
        "after a restart, an agent must complete (exit 0), halt for a person (3), wait for "
        "one (4) or ask to be run again later (75): see how its output ends, in the detail"
    ),
    Kind.PERFORMED_TWICE: (
        "find out why the provider performed it again: check that the --count command counts "
        "this agent's effects only, and that {tool} passes its idempotency key to the provider"
    ),
}
RELIANCE_FIXES = {
    Reliance.WINDOW: (
        "{tool}'s provider did not deduplicate the call sent again with the same key: it "
        "ignores the key, or forgets it sooner than the declared dedupe_window. Remove "
        "dedupe_window from {tool} (an effect in doubt then asks its probe or a person), or "
        "pass the key where the provider honours it"
    ),
    Reliance.PROBE: (
        "{tool}'s probe answered that the effect had not happened when the provider had "
        "performed it: make it look the key up where the provider records it, and answer "
        "NOT_FOUND only when it is sure"
    ),
}
# A read changes nothing, by declaration: calling it again is never reported.
HARMLESS_KINDS = {"read"}
# Only an upsert is called again blindly; anything else doing so is oncelog's fault.
UNEXPECTED_RETRY = (
    "oncelog never calls a {kind} effect again while its last attempt is in doubt without "
    "a probe's or a person's word: report this as a bug, with the trial's ledger (--keep DIR)"
)
# ReplayDivergence's message: "position N records TYPE step ID (TOOL); the code now asks
# for TYPE step ID (TOOL)"; the run keeps it as its halt reason.
DIVERGENCE = re.compile(
    r"records (?P<type>\w+) step (?P<old>'[^']*'|\"[^\"]*\") \((?P<tool>[^)]*)\); "
    r"the code now asks for (?P<new_type>\w+) step (?P<new>'[^']*'|\"[^\"]*\") "
    r"\((?P<new_tool>[^)]*)\)"
)


@dataclass(frozen=True)
class Problem:
    kind: Kind
    detail: str
    fix: str
    run_id: str | None = None
    step_id: str | None = None
    tool: str | None = None
    key: str | None = None


def ran_twice(evidence: Evidence, accepted: Iterable[str] = ()) -> list[Problem]:
    """Effects attempted again while the previous attempt's outcome was unknown, unless a
    probe (its answer is the intent's reason) or a recorded "not done" allowed it."""
    accepted = set(accepted)
    steps: defaultdict[tuple[str, int | None], list[oncelog.JournalEntry]] = defaultdict(list)
    for entry in evidence.journal:
        if entry.seq is not None:
            steps[(entry.run_id, entry.seq)].append(entry)
    problems = []
    for entries in steps.values():
        intents = [e for e in entries if e.event == "intent" and e.data.get("type") == "effect"]
        if len(intents) < 2:
            continue
        first = intents[0].data
        if first["kind"] in HARMLESS_KINDS or first["tool"] in accepted:
            continue
        blind = _blind_attempts(entries)
        if blind:
            problems.append(_ran_twice(intents[0], len(intents), blind))
    return problems


def _blind_attempts(entries: list[oncelog.JournalEntry]) -> list[int]:
    """The attempts started while the one before might have happened."""
    blind, known_not_done, started = [], False, False
    for entry in entries:
        data = entry.data
        if entry.event == "intent":
            if started and not known_not_done and data.get("reason") is None:
                blind.append(int(data["attempt"]))
            started, known_not_done = True, False
        elif (entry.event, data.get("state"), data.get("resolution")) in (
            ("outcome", "not_done", None),
            ("resolved", None, "not_done"),
        ):
            known_not_done = True
    return blind


def _ran_twice(first: oncelog.JournalEntry, attempts: int, blind: list[int]) -> Problem:
    data = first.data
    which = ", ".join(map(str, blind))
    detail = (
        f"{data['kind']} effect {data['step_id']!r} ({data['tool']}) was attempted {attempts} "
        f"times under one key; attempt {which} started while the attempt before might "
        "already have happened at the provider"
    )
    fix = FIXES[Kind.RAN_TWICE] if data["kind"] == "upsert" else UNEXPECTED_RETRY
    return Problem(
        Kind.RAN_TWICE, detail, fix.format(tool=data["tool"], kind=data["kind"]),
        first.run_id, data["step_id"], data["tool"], data["key"],
    )  # fmt: skip


@dataclass(frozen=True)
class Recovery:
    """An effect in doubt that a restart settled on someone's word but the provider's."""

    run_id: str
    step_id: str
    tool: str
    relied_on: Reliance
    said: str  # what the journal recorded


def recoveries(evidence: Evidence) -> list[Recovery]:
    """The effects in doubt that a declared window sent again, or a probe's answer sent
    again or recorded done, in the journal's order."""
    first: dict[tuple[str, int | None], dict[str, object]] = {}
    found = []
    for entry in evidence.journal:
        data, where = entry.data, (entry.run_id, entry.seq)
        if entry.event == "intent" and data.get("type") == "effect":
            first.setdefault(where, data)
            reason = str(data.get("reason") or "")
            relied = _reliance(reason)
            if relied is not None:
                found.append(
                    Recovery(entry.run_id, str(data["step_id"]), str(data["tool"]), relied, reason)
                )
        elif entry.event == "probed" and where in first:
            step = first[where]
            found.append(
                Recovery(
                    entry.run_id, str(step["step_id"]), str(step["tool"]), Reliance.PROBE,
                    "the probe found it at the provider: recorded done without calling it",
                )
            )  # fmt: skip
    return found


def _reliance(reason: str) -> Reliance | None:
    if "the provider deduplicates it" in reason:
        return Reliance.WINDOW
    if "the probe answered" in reason:
        return Reliance.PROBE
    return None


def performed_twice(
    beyond: dict[str, tuple[int, int]], relied: Iterable[Recovery], run_id: str
) -> list[Problem]:
    """The tools the provider performed more often in this trial than in the clean run,
    each with the recovery that let it happen, as far as the ledger shows one."""
    relied = list(relied)
    problems = []
    for tool, (count, clean) in beyond.items():
        whose = [r for r in relied if r.tool == tool or tool == ALL_TOOLS]
        what = "every tool together" if tool == ALL_TOOLS else tool
        detail = (
            f"the provider performed {what} {count} times in this trial, {clean} in the run "
            "without crashes"
        )
        if whose:
            detail += (
                "; the restart relied on "
                + ", ".join(dict.fromkeys(f"{_RELIED[r.relied_on]} ({r.tool})" for r in whose))
                + ", not on what the provider showed"
            )
            fix = RELIANCE_FIXES[whose[-1].relied_on]
        else:
            fix = FIXES[Kind.PERFORMED_TWICE]
        named = whose[-1].tool if whose else what
        step_id = whose[-1].step_id if whose else None
        problems.append(
            Problem(Kind.PERFORMED_TWICE, detail, fix.format(tool=named), run_id, step_id, named)
        )
    return problems


_RELIED = {Reliance.WINDOW: "the declared dedupe_window", Reliance.PROBE: "the probe's answer"}


def not_resumed(at_kill: Evidence, final: Evidence) -> list[Problem]:
    """Runs the killed process left running that no later process entered again."""
    later = [e for e in final.journal if e.id > at_kill.last_id]
    entered = {e.run_id for e in later}
    opened = ", ".join(repr(e.run_id) for e in later if e.event == "run_created")
    problems = []
    for run in at_kill.runs:
        if run.status is not oncelog.RunStatus.RUNNING or run.run_id in entered:
            continue
        detail = f"the killed process left run {run.run_id!r} unfinished and no restart resumed it"
        if opened:
            detail += f"; the restarted process opened {opened} instead"
        again = _repeated(at_kill, later, run.run_id)
        if again:
            detail += f", and started {again} again under new keys no provider can match"
        effects = [e for e in at_kill.effects() if e.run_id == run.run_id]
        fix = FIXES[Kind.RUN_ID_AT_START]
        step_id, tool = (effects[-1].step_id, effects[-1].tool) if effects else (None, None)
        problems.append(Problem(Kind.RUN_ID_AT_START, detail, fix, run.run_id, step_id, tool))
    return problems


def _repeated(at_kill: Evidence, later: list[oncelog.JournalEntry], run_id: str) -> str:
    """The tools of ``run_id``'s effects that other runs started again with the same
    arguments after the kill."""
    started = {
        (e.data["tool"], e.data["args_hash"])
        for e in at_kill.effect_intents()
        if e.run_id == run_id
    }
    return ", ".join(
        dict.fromkeys(
            e.data["tool"]
            for e in later
            if e.event == "intent"
            and e.run_id != run_id
            and (e.data.get("tool"), e.data.get("args_hash")) in started
        )
    )


def divergences(final: Evidence) -> list[Problem]:
    """Runs halted because a restarted process asked for another step than recorded."""
    return [
        _divergence(run.run_id, run.reason or "")
        for run in final.runs
        if run.stopped_by == oncelog.ReplayDivergence.__name__
    ]


def _divergence(run_id: str, reason: str) -> Problem:
    found = DIVERGENCE.search(reason)
    if found is None or (found["type"], found["tool"]) != (found["new_type"], found["new_tool"]):
        return Problem(Kind.REPLAY_DIVERGED, reason, FIXES[Kind.REPLAY_DIVERGED], run_id=run_id)
    old, new = ast.literal_eval(found["old"]), ast.literal_eval(found["new"])
    detail = (
        f"the {found['type']} step recorded as {old!r} ({found['tool']}) was asked for as "
        f"{new!r} after the restart"
    )
    return Problem(
        Kind.STEP_IDS_CHANGE, detail, FIXES[Kind.STEP_IDS_CHANGE], run_id=run_id, step_id=old,
        tool=found["tool"],
    )  # fmt: skip
