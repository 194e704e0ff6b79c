"""CrewAI: a run per task execution, its tools as oncelog effects, its model recorded.

    from oncelog.integrations import crewai as oncelog_crewai

    guard = oncelog_crewai.Guard(ledger, crew="billing",
                                 kinds={"send_email": "create", "charge": "payment"})
    result = guard.kickoff(crew, request="ticket-4711", inputs={...})

Each task the crew executes is the run ``billing/ticket-4711/task-N``: the crew's name (a
stable name the user gives), the request, and the task's position in ``crew.tasks``
(``Task.id`` is a fresh uuid in every process, so never used). Its agents' models are
recorded (``RecordedLLM``) and its tools guarded, on both of CrewAI's tool paths (native
function calling and ReAct text): the tool object itself is replaced, so CrewAI's own
tool execution, its exception handling included, calls the guard.

CrewAI retries a task whose agent raised (``max_retry_limit``): the guard sets the limit
to 0 and retries itself by re-entering the task's run, so the recorded model calls and
tool results replay and no effect runs twice. A failed guardrail re-runs the task in the
same run, with new input; the re-run's steps take the next positions, and a guarded call
with the same tool and arguments as one made by an earlier attempt of the task is
answered with that call's result, not made again.

CrewAI catches every exception a tool raises and shows it to the model. A stop (an
effect in doubt, a halt, an approval needed) is the run's sticky stop: the next model
call or tool call of the run raises it again, which CrewAI does not catch, and
``kickoff`` raises it to its caller.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from oncelog import ConfigurationError, Ledger, OnceLogError, ReplayDivergence, UsageError

from ._common import (
    Policy,
    PolicyLike,
    digest,
    keyed,
    mark,
    marked,
    model_step,
    next_step_id,
    policies,
    policy_for,
    repeatable_names,
    sync_run,
    unguarded,
)
from ._common import missing_extra as _missing

try:
    from crewai import Crew, Task
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools import BaseTool
    from crewai.tools.agent_tools.base_agent_tools import BaseAgentTool
    from crewai.tools.base_tool import Tool
    from pydantic import BaseModel
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("crewai", "CrewAI") from exc

__all__ = ["Guard", "RecordedLLM", "guard_tool"]

_FIX = "Guard it: oncelog.integrations.crewai.Guard(ledger, crew=..., kinds={%r: KIND})"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class RecordedLLM(BaseLLM):
    """A CrewAI model whose answers are recorded in the run the task executes in: a
    replay gets them back without a request. A call asked at a recorded position with
    other messages than recorded is a divergence: it stops the run
    (``ReplayDivergence``), unless ``divergence="warn"``, which returns the recorded
    answer. Tools are never run inside the recorded call: CrewAI runs the tool calls the
    answer holds, through the guarded tools."""

    llm: BaseLLM
    step_name: str = "model"
    divergence: Literal["stop", "warn"] = "stop"

    @classmethod
    def around(cls, llm: BaseLLM) -> RecordedLLM:
        return llm if isinstance(llm, RecordedLLM) else cls(llm=llm, model=llm.model)

    def call(
        self,
        messages: Any,
        tools: list[dict[str, Any]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: type[BaseModel] | None = None,
    ) -> Any:
        run = sync_run("CrewAI model")
        asked = digest([messages, tools])

        def ask() -> dict[str, Any]:
            answer = self.llm.call(
                messages, tools, callbacks, None, from_task, from_agent, response_model
            )
            return {"answer": _jsonable(answer), "asked": asked}

        with model_step(run, self.step_name) as step:
            recorded = run.llm(step, ask, name="crewai_model", input_digest=asked)
        if recorded["asked"] != asked and self.divergence == "stop":
            raise ReplayDivergence(
                f"model call {step!r} was recorded for other messages: the crew asked "
                "something else at this position (changed code, prompts or inputs). Start "
                "a new request, or pass divergence='warn' to take the recorded answer",
                run_id=run.run_id, step_id=step,
            )  # fmt: skip
        answer = recorded["answer"]
        if response_model is not None and isinstance(answer, dict):
            return response_model.model_validate(answer)
        if available_functions and isinstance(answer, list):
            return _run_first_call(answer, available_functions)
        return answer

    def supports_function_calling(self) -> bool:
        supports = getattr(self.llm, "supports_function_calling", None)  # not every BaseLLM's
        return bool(supports()) if callable(supports) else False

    def supports_stop_words(self) -> bool:
        return bool(self.llm.supports_stop_words())

    def get_context_window_size(self) -> int:
        return int(self.llm.get_context_window_size())


def _jsonable(answer: Any) -> Any:
    if isinstance(answer, BaseModel):
        return answer.model_dump(mode="json")
    if isinstance(answer, list):
        return [_jsonable(item) for item in answer]
    return json.loads(json.dumps(answer, default=lambda o: _jsonable_object(o)))


def _jsonable_object(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise UsageError(f"oncelog cannot record a CrewAI model answer holding {value!r}")


def _run_first_call(calls: list[Any], available: dict[str, Any]) -> Any:
    """What CrewAI's ``BaseLLM._handle_tool_execution`` does for a model asked to run its
    tools itself: the first call's result; but an oncelog stop is raised, not logged."""
    function = calls[0].get("function", {}) if isinstance(calls[0], dict) else {}
    name, raw = function.get("name"), function.get("arguments") or "{}"
    if name not in available:
        return None
    result = available[name](**(json.loads(raw) if isinstance(raw, str) else raw))
    return result if isinstance(result, str) else str(result)


# -- tools ---------------------------------------------------------------------------------


@dataclasses.dataclass
class _Attempts:
    """A task execution's attempts in its run: CrewAI's guardrail re-runs the task in
    the same run, and a call an earlier attempt made is answered, not made again."""

    task: Task
    attempt: int = 0
    done: dict[tuple[str, str], tuple[int, Any]] = dataclasses.field(default_factory=dict)

    def earlier(self, name: str, arguments: Any) -> tuple[bool, Any]:
        found = self.done.get((name, digest(arguments)))
        if found is None or found[0] == self.attempt:
            return False, None
        return True, found[1]

    def remember(self, name: str, arguments: Any, result: Any) -> None:
        self.done.setdefault((name, digest(arguments)), (self.attempt, result))


_attempts: contextvars.ContextVar[_Attempts | None] = contextvars.ContextVar(
    "oncelog_crewai_attempts", default=None
)


def guard_tool(tool: BaseTool, policy: PolicyLike) -> BaseTool:
    """A copy of ``tool`` whose every call is an oncelog effect at the next position of
    the task's run. CrewAI's own handling of its errors is kept (it shows them to the
    model), except for oncelog's stops, which stick: the next model or tool call of the
    run raises them again. The tool reads its key with ``current_idempotency_key()``."""
    if marked(tool) == "guarded":
        return tool  # guarding twice would make each call an effect inside an effect
    policy = policy if isinstance(policy, Policy) else Policy(policy)
    name = tool.name
    if isinstance(tool, Tool):
        guarded: BaseTool = tool.model_copy(update={"func": _effect(name, policy, tool.func)})
    else:
        guarded = tool.model_copy()
        object.__setattr__(guarded, "_run", _effect(name, policy, tool._run))
    mark(guarded, "guarded")
    return guarded


def _effect(name: str, policy: Policy, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        run = sync_run("CrewAI tool")
        arguments = _jsonable({"args": list(args), **kwargs} if args else kwargs)
        attempts = _attempts.get()
        again, result = (False, None) if attempts is None else attempts.earlier(name, arguments)
        if again:
            return result

        def perform(arguments: Any, *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                return _jsonable(fn(*args, **kwargs))

        result = run.effect(next_step_id(run, name), policy.tool(name, perform), arguments)
        if attempts is not None:
            attempts.remember(name, arguments, result)
        return result

    return call


# -- crews ---------------------------------------------------------------------------------

_request: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "oncelog_crewai_request", default=None
)


class Guard:
    """Runs crews exactly-once: ``kickoff(crew, request=...)`` guards the crew in place
    (its agents' models recorded, their tools guarded, CrewAI's task retry replaced) and
    executes each of its tasks in a run of its own. ``kinds`` maps each tool's name to its
    kind or ``Policy``; ``repeatable`` names tools safe to run again on every replay; any
    other tool is refused (``oncelog.UnguardedTool``) before a model is asked. ``retries``
    is how many times a task whose agent raised is re-entered (by default, its agent's
    ``max_retry_limit``)."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        crew: str,
        kinds: Mapping[str, PolicyLike],
        repeatable: Iterable[str] = (),
        retries: int | None = None,
    ) -> None:
        self.ledger = ledger
        self.crew = _checked(crew, "crew")
        self.policies = policies(kinds)
        self.repeatable = repeatable_names(repeatable, kinds)
        self.retries = retries

    def kickoff(self, crew: Crew, *, request: str, inputs: dict[str, Any] | None = None) -> Any:
        """``crew.kickoff(inputs)`` with each task executed in its run,
        ``CREW/REQUEST/task-N``; an oncelog stop is raised to the caller."""
        self.guard(crew)
        token = _request.set(_checked(request, "request"))
        try:
            return crew.kickoff(inputs=inputs)
        finally:
            _request.reset(token)

    def guard(self, crew: Crew) -> Crew:
        """Guard ``crew`` in place (``kickoff`` does it); guarding it again does nothing."""
        for agent in crew.agents:
            self._agent(agent)
        if crew.manager_llm is not None and not isinstance(crew.manager_llm, str):
            crew.manager_llm = RecordedLLM.around(crew.manager_llm)
        for position, task in enumerate(crew.tasks, start=1):
            task.tools = [self._tool(t) for t in task.tools or []]
            if not getattr(task.execute_sync, "_oncelog_guarded", False):
                object.__setattr__(task, "execute_sync", self._executor(task, position))
        return crew

    def _agent(self, agent: Any) -> None:
        if getattr(agent, "_oncelog_retries", None) is not None:
            return
        if not isinstance(agent.llm, BaseLLM):
            raise ConfigurationError(f"CrewAI agent {agent.role!r} has no model to record")
        agent.llm = RecordedLLM.around(agent.llm)
        agent.tools = [self._tool(t) for t in agent.tools or []]
        object.__setattr__(agent, "_oncelog_retries", agent.max_retry_limit)
        agent.max_retry_limit = 0  # CrewAI's retry would run the task again, live
        original = agent.execute_task

        def execute_task(task: Task, *args: Any, **kwargs: Any) -> Any:
            attempts = _attempts.get()
            if attempts is not None and attempts.task is task:
                attempts.attempt += 1  # the first attempt, or a guardrail's re-run
            return original(task, *args, **kwargs)

        object.__setattr__(agent, "execute_task", execute_task)

    def _tool(self, tool: BaseTool) -> BaseTool:
        if marked(tool) is not None or isinstance(tool, BaseAgentTool):
            return tool  # guarded already, or a delegation: its agent's steps are recorded
        if tool.name in self.repeatable:
            kept = tool.model_copy()
            mark(kept, "repeatable")
            return kept
        if tool.name not in self.policies:
            raise unguarded("CrewAI", tool.name, _FIX % tool.name)
        return guard_tool(tool, policy_for(self.policies, tool.name, "CrewAI"))

    def _executor(self, task: Task, position: int) -> Callable[..., Any]:
        """``task.execute_sync`` in the task's run, re-entered for CrewAI's retries."""
        original = task.execute_sync

        def execute_sync(
            agent: Any = None, context: str | None = None, tools: list[Any] | None = None
        ) -> Any:
            request = _request.get()
            if request is None:
                raise UsageError(
                    "a guarded CrewAI crew ran outside Guard.kickoff(crew, request=...)"
                )
            agent = agent or task.agent
            self._agent(agent)  # a hierarchical crew's manager is made by kickoff
            run_id = f"{self.crew}/{request}/task-{position}"
            tools = [self._tool(t) for t in tools or []]
            retries = self.retries
            if retries is None:
                retries = int(getattr(agent, "_oncelog_retries", 0) or 0)
            for attempt in range(retries + 1):
                try:
                    with self._run(run_id, task):
                        return original(agent, context, tools)
                except OnceLogError:
                    raise
                except Exception:
                    if attempt == retries:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover

        execute_sync._oncelog_guarded = True  # type: ignore[attr-defined]
        return execute_sync

    @contextmanager
    def _run(self, run_id: str, task: Task) -> Iterator[None]:
        token = _attempts.set(_Attempts(task))
        try:
            with self.ledger.run(run_id):
                yield
        finally:
            _attempts.reset(token)


def _checked(name: str, what: str) -> str:
    """A crew's name or a request: part of every run id, so stable and plain."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"{what} {name!r} must be 1 to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit: it names the crew's runs"
        )
    return name
