"""The same 20-step agent (12 model calls, 8 effects, all no-ops, so what is measured is
the framework) on each contender, and the child process that runs it.

A child runs ``python bench/peers.py --child NAME --db PATH --mode MODE --marker FILE``:
- ``warm N``: one warm-up run, then N runs of fresh run ids; prints ms per run, wall
  and CPU;
- ``once``: one run, then exits (the parent times the whole process);
- ``crash``: one run that kills itself (SIGKILL) as its last step starts;
- ``resume``: resumes the crashed run; its last step writes ``time.time()`` to the
  marker, so the parent knows when the restarted process reached it.
oncelog's statements replayed raw (``replay``) run only ``warm``.
"""

from __future__ import annotations

import operator
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

if TYPE_CHECKING:
    import oncelog

STEPS = 20
EFFECTS = frozenset(i for i in range(STEPS) if i % 5 in (1, 3))  # 8 effects
LAST = STEPS - 1  # a model call: a crash inside it leaves nothing in doubt
CRASH_RUN = "crashed"


class Marks:
    """What the last step does in a ``crash`` or ``resume`` child."""

    def __init__(self, mode: str, marker: str | None) -> None:
        self.mode, self.marker = mode, marker

    def last_step(self) -> None:
        if self.mode == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode == "resume" and self.marker:
            Path(self.marker).write_text(repr(time.time()))


def model(i: int) -> dict[str, Any]:
    return {"choices": [{"message": {"content": f"thought {i}"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}  # fmt: skip


def effect(i: int, idempotency_key: str = "") -> dict[str, Any]:
    return {"id": f"e{i}", "key": idempotency_key}


def step_function(i: int, marks: Marks) -> Callable[..., dict[str, Any]]:
    """Step ``i``'s work: the last one also marks (or crashes)."""
    work = effect if i in EFFECTS else model

    def step(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if i == LAST:
            marks.last_step()
        return work(i, *args, **kwargs)

    return step


Runner = Callable[[str], None]


def bare(db: Path, marks: Marks) -> Runner:
    steps = [step_function(i, marks) for i in range(STEPS)]

    def run(run_id: str) -> None:
        for step in steps:
            step()

    return run


def oncelog_agent(db: Path, marks: Marks) -> Runner:
    import oncelog

    return oncelog_steps(oncelog.open(str(db)), marks)


def oncelog_steps(ledger: oncelog.Ledger, marks: Marks) -> Runner:
    steps = [step_function(i, marks) for i in range(STEPS)]
    tools = {i: ledger.tool(kind="create", name=f"effect_{i}")(steps[i]) for i in EFFECTS}

    def run(run_id: str) -> None:
        with ledger.run(run_id) as run:
            for i in range(STEPS):
                if i in EFFECTS:
                    run.effect(f"s{i}", tools[i])
                else:
                    run.llm(f"s{i}", steps[i])

    return run


def oncelog_raw(db: Path, marks: Marks) -> Runner:
    """oncelog's run recorded, then its statements replayed on a plain connection
    (``replay``): warm runs only, it starts none of its own."""
    from .replay import replayed

    return replayed(db, lambda ledger: oncelog_steps(ledger, marks))


def dbos_agent(db: Path, marks: Marks) -> Runner:
    from dbos import DBOS, SetWorkflowID

    DBOS(config={"name": "peers", "system_database_url": f"sqlite:///{db}"})
    steps = [DBOS.step(name=f"s{i}")(step_function(i, marks)) for i in range(STEPS)]

    @DBOS.workflow(name="agent")
    def agent() -> None:
        for step in steps:
            step()

    DBOS.launch()

    def run(run_id: str) -> None:
        with SetWorkflowID(run_id):
            agent()

    return run


class _State(TypedDict):
    results: Annotated[list[dict[str, Any]], operator.add]


def langgraph_agent(db: Path, marks: Marks) -> Runner:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(_State)
    previous = START
    for i in range(STEPS):
        work = step_function(i, marks)
        graph.add_node(f"s{i}", lambda state, work=work: {"results": [work()]})
        graph.add_edge(previous, f"s{i}")
        previous = f"s{i}"
    graph.add_edge(previous, END)
    saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
    app = graph.compile(checkpointer=saver)

    def run(run_id: str) -> None:
        config: Any = {"configurable": {"thread_id": run_id}}
        # A thread with a checkpoint resumes from it when given no input.
        started = app.get_state(config).values
        app.invoke(None if started else {"results": []}, config)

    return run


RAW = "oncelog's statements, raw"
# Contenders only the warm measurement applies to: a replay has no start or restart of its
# own to time.
WARM_ONLY = frozenset({RAW})
AGENTS: dict[str, Callable[[Path, Marks], Runner]] = {
    "bare loop": bare,
    "oncelog": oncelog_agent,
    RAW: oncelog_raw,
    "DBOS (SQLite)": dbos_agent,
    "LangGraph (SqliteSaver)": langgraph_agent,
}


def child_main(name: str, db: str, mode: str, marker: str | None) -> int:
    how, _, count = mode.partition(":")
    run = AGENTS[name](Path(db), Marks(how, marker))
    if how == "warm":
        run("warm-up")
        runs = int(count)
        start, cpu = time.perf_counter(), time.process_time()
        for n in range(runs):
            run(f"run-{n}")
        wall_ms = (time.perf_counter() - start) / runs * 1000
        print(f"{wall_ms:.4f} {(time.process_time() - cpu) / runs * 1000:.4f}")
    else:  # once, crash, resume
        run(CRASH_RUN if how in ("crash", "resume") else "once")
    os._exit(0)  # no framework's shutdown in the timed process's end (DBOS's threads)
