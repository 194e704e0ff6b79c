"""Google ADK: one oncelog run per invocation, its tool calls effects, its model recorded.

    from oncelog.integrations import google_adk as oncelog_adk

    guard = oncelog_adk.Guard(ledger, kinds={"send_email": "create", "charge": "payment"})
    app = App(name="billing", root_agent=agent, plugins=[guard],
              resumability_config=ResumabilityConfig(is_resumable=True))
    runner = Runner(app=app, session_service=DatabaseSessionService(...))
    async for event in guard.run_async(runner, user_id="ada", session_id="ticket-4711",
                                       new_message=message):
        ...

Each ADK invocation is the run ``APP/USER/SESSION/INVOCATION``: what ADK keeps in the
session across a restart (the invocation id is stored with the user's message, and ADK's
Resume and its tool confirmation continue the invocation under the same id). A process
restarted with the same message resumes the session's unfinished invocation (its run not
completed) under its id instead of starting a new one; an answer to ADK's confirmation
request continues the invocation that asked it. The agent runs again from the top in that
run: recorded model answers come back without a request (no tokens spent), recorded tool
results come back without a call, and only what never finished runs live. A finished
invocation started again by its id is answered from the session: nothing is asked or run.

``Guard`` is an ADK plugin. It records every ``LlmAgent``'s model (``RecordedLlm``) and
refuses, before the first model call, an agent with a tool nobody declared
(``oncelog.UnguardedTool``): ADK's Resume would run it again. Its ``before_tool_callback``
runs each guarded call itself, as an oncelog effect, and hands ADK the result; the tool
reads its key with ``current_idempotency_key()``. Steps are named ``model#1``,
``send_email#1``: by count in the run, never by the call ids a model makes up.

ADK's tool confirmation (``FunctionTool(require_confirmation=...)``, or a tool calling
``tool_context.request_confirmation()`` itself) becomes an oncelog approval bound to the
arguments: ADK asks the person as it always does; when the answer
comes back, the guard approves (or denies) the oncelog request of that step for exactly
the arguments ADK showed the person (``originalFunctionCall``), and the effect runs once,
under that approval. A call whose arguments differ from those the person confirmed is not
run: the approval stays pending for a person (``oncelog approvals``). A re-run of the
invocation returns the recorded result and never runs the confirmed tool again.

A stop (an effect in doubt, a halt, a denial of budget) is raised from the plugin's
callback, which ADK runs outside its tool error handling: ``on_tool_error_callback``
plugins (``ReflectAndRetryToolPlugin``) never see it, so the model is not asked to call
the tool again; and it sticks: any later step of the run raises it again, and the run ends
halted (``oncelog.run_main`` exits 3); ADK's retry of a failed agent (``retry_config``)
meets it again before any step. The error ADK records for it is kept out of the session,
whose Resume would take it for the invocation's final answer: the start after the stop
replays to its step, as after a kill. A provider's definite refusal (the policy's
``refusals``) and an error of an idempotent kind go back to the model as ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import aclosing, suppress
from typing import Any

from oncelog import (
    ApprovalDenied,
    AsyncRun,
    ConfigurationError,
    EffectRefused,
    Ledger,
    OnceLogError,
    RunStatus,
    UnknownRun,
    UsageError,
    current_run,
)

from ._common import (
    ModelDrift,
    PolicyLike,
    digest,
    keyed,
    model_drift,
    model_step,
    next_step_id,
    policies,
    repeatable_names,
    unguarded,
)
from ._common import missing_extra as _missing

try:
    from google.adk.agents import BaseAgent, LlmAgent
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.agents.run_config import RunConfig
    from google.adk.events.event import Event
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.runners import Runner
    from google.adk.sessions.session import Session
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.base_toolset import BaseToolset
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("google-adk", "Google ADK") from exc

__all__ = ["Guard", "RecordedLlm"]

_FIX = "Guard it: oncelog.integrations.google_adk.Guard(ledger, kinds={%r: KIND})"
_CONFIRM = "adk_request_confirmation"  # ADK's function call asking a person to confirm
_REJECTED = {"error": "This tool call is rejected."}  # what ADK answers a rejected call
_DECIDED_BY = "google-adk confirmation"
_ADK_ASKS = "adk_request_"  # adk_request_confirmation, _credential, _input: ADK's own calls
_OTHER_ARGUMENTS = {
    "error": "This tool call was confirmed with other arguments: it did not run. Ask for "
    "it again to have these arguments confirmed."
}


class RecordedLlm(BaseLlm):
    """An ADK model whose answers are recorded in the run of the invocation: a resumed
    invocation gets them back without a request. A call asked at a recorded position with
    other contents than recorded stops the run (``ArgumentDrift``) unless ``drift="warn"``.
    Whole answers only: ``StreamingMode.SSE`` is refused."""

    llm: BaseLlm
    step_name: str = "model"
    drift: ModelDrift = "error"

    @classmethod
    def around(cls, llm: BaseLlm) -> RecordedLlm:
        return llm if isinstance(llm, RecordedLlm) else cls(model=llm.model, llm=llm)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if stream:
            raise UsageError("oncelog records whole model answers: run ADK without SSE streaming")
        run = _current("Google ADK model")
        asked = digest([c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents])

        async def call() -> dict[str, Any]:
            last = None
            async with aclosing(self.llm.generate_content_async(llm_request)) as answers:
                async for answer in answers:
                    if not answer.partial:
                        last = answer
            if last is None:
                raise UsageError(f"model {self.llm.model!r} gave no answer")
            return _recorded_answer(last)

        with model_step(run, self.step_name) as step:
            recorded = await run.llm(
                step, call, name="google_adk_model", input_digest=asked,
                drift=model_drift(self.drift),
            )  # fmt: skip
        yield LlmResponse.model_validate(recorded["response"])


def _current(what: str) -> AsyncRun:
    run = current_run()
    if not isinstance(run, AsyncRun):
        raise UsageError(
            f"a guarded {what} ran outside Guard.run_async(runner, ...): its invocation "
            "has no oncelog run"
        )
    return run


class Guard(BasePlugin):
    """The ADK plugin that makes an app's invocations exactly-once (see the module's doc).
    ``kinds`` maps each tool's name to its kind or ``Policy``; ``repeatable`` names tools
    safe to run again on every replay, unguarded; any other tool is refused."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        kinds: Mapping[str, PolicyLike],
        repeatable: Iterable[str] = (),
        agent: str | None = None,
    ) -> None:
        super().__init__(name="oncelog")
        self.ledger = ledger
        self.policies = policies(kinds)
        self.repeatable = repeatable_names(repeatable, kinds)
        self.agent = agent
        # By invocation, while it runs: the stop a tool call met. It sticks: ADK's retry of
        # a failed agent (``retry_config``) meets it again before any step is taken.
        self._stopped: dict[str, OnceLogError] = {}

    # -- invocations ---------------------------------------------------------------------

    async def run_async(
        self,
        runner: Runner,
        *,
        user_id: str,
        session_id: str,
        new_message: types.Content | None = None,
        invocation_id: str | None = None,
        run_config: RunConfig | None = None,
    ) -> AsyncIterator[Event]:
        """``runner.run_async(...)`` inside the invocation's oncelog run: the invocation
        ``invocation_id`` names, or the one an answer to a confirmation continues, or the
        session's unfinished invocation of the same message, or a new one."""
        if runner.plugin_manager.get_plugin(self.name) is not self:
            raise ConfigurationError("add the guard to the app: App(..., plugins=[guard])")
        if not isinstance(runner.agent, BaseAgent):
            raise ConfigurationError("oncelog guards an app whose root is an ADK agent")
        self.guard(runner.agent)
        session = await runner.session_service.get_session(
            app_name=runner.app_name, user_id=user_id, session_id=session_id
        )
        invocation = invocation_id or self._invocation(
            runner.app_name, session, new_message, user_id, session_id
        )
        run_id = f"{runner.app_name}/{user_id}/{session_id}/{invocation}"
        finished = session is not None and _finished(session.events, invocation)
        if finished and await asyncio.to_thread(self._completed, run_id):
            # A restart after the answer: ADK would ask the model again; the session's
            # events are the invocation's answer.
            for event in session.events if session is not None else []:
                if event.invocation_id == invocation and event.author != "user":
                    yield event
            return
        async with self.ledger.run(run_id, agent=self.agent, origin="google-adk") as run:
            if session is not None:
                await self._catch_up(run, session, invocation)
            events = runner.run_async(
                user_id=user_id, session_id=session_id, invocation_id=invocation,
                new_message=new_message, run_config=run_config,
            )  # fmt: skip
            try:
                async with aclosing(events) as stream:
                    async for event in stream:
                        yield event
            except RuntimeError as wrapped:  # ADK's plugin manager wraps what a plugin raised
                if isinstance(wrapped.__cause__, OnceLogError):
                    raise wrapped.__cause__ from None
                raise
            finally:
                self._stopped.pop(invocation, None)

    async def _catch_up(self, run: AsyncRun, session: Session, invocation: str) -> None:
        """Take the positions of what the session says this invocation did already: ADK
        resumes an invocation after its last event, without asking the model for answers
        it holds or running calls it has responses to, while the run replays from the top.
        What the session holds and the run does not is recorded as the session says."""
        calls: dict[str, dict[str, Any]] = {}
        recorded = await asyncio.to_thread(self.ledger.steps, run.run_id)
        digests = {r.step_id: _input_digest(r.args_json) for r in recorded}
        for event in session.events:
            if event.invocation_id != invocation or event.author == "user" or event.partial:
                continue
            for call in event.get_function_calls():
                calls[str(call.id)] = dict(call.args or {})
            if _model_answer(event):
                answer = _recorded_answer(LlmResponse(content=event.content))
                step = next_step_id(run, "model")
                await run.llm(
                    step, lambda answer=answer: answer, name="google_adk_model",
                    input_digest=digests.get(step),
                )  # fmt: skip
            for response in event.get_function_responses():
                name, said = str(response.name), response.response
                if name not in self.policies or _placeholder(said):
                    continue
                effect = self.policies[name].tool(name, _recorded(said))
                # A refusal or a denial recorded so: the session holds what the model was
                # told of it, and the step keeps its position.
                with suppress(EffectRefused, ApprovalDenied):
                    step = next_step_id(run, name)
                    await run.effect(step, effect, calls.get(str(response.id), {}))

    def _invocation(
        self,
        app: str,
        session: Session | None,
        message: types.Content | None,
        user: str,
        session_id: str,
    ) -> str:
        events = [] if session is None else session.events
        answered = _answered_call(events, message)
        if answered is not None:
            return answered
        if message is None:
            raise UsageError("resume an invocation by its invocation_id, or send a message")
        for event in reversed(events):
            if event.author == "user" and _said(event.content) == _said(message):
                run_id = f"{app}/{user}/{session_id}/{event.invocation_id}"
                if not self._completed(run_id):
                    return event.invocation_id  # a restart: ADK's Resume of that invocation
                break
        return f"e-{uuid.uuid4()}"  # a new turn: ADK's own form of invocation id

    def _completed(self, run_id: str) -> bool:
        try:
            return self.ledger.get_run(run_id).status is RunStatus.COMPLETED
        except UnknownRun:
            return True  # not an invocation this guard ran

    # -- agents --------------------------------------------------------------------------

    def guard(self, agent: BaseAgent) -> BaseAgent:
        """Record the model of ``agent`` and of every agent under it, in place, and refuse
        a tool nobody declared (``run_async`` does it; doing it again changes nothing)."""
        if isinstance(agent, LlmAgent):
            for tool in agent.tools:
                self._check(tool)
            if isinstance(agent.model, str) or agent.model is None:
                agent.model = agent.canonical_model
            if isinstance(agent.model, BaseLlm):
                agent.model = RecordedLlm.around(agent.model)
        for child in agent.sub_agents:
            self.guard(child)
        return agent

    def _check(self, tool: Any) -> None:
        if isinstance(tool, BaseToolset):
            raise unguarded(
                "Google ADK", type(tool).__name__,
                "A toolset's tools are listed only at the model call: give the agent its "
                "tools one by one",
            )  # fmt: skip
        name = str(getattr(tool, "name", None) or getattr(tool, "__name__", tool))
        if name not in self.policies and name not in self.repeatable:
            raise unguarded("Google ADK", name, _FIX % name)

    # -- the plugin's callbacks ----------------------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        _current("Google ADK model")  # refused before a token is spent
        self._stop_again(callback_context.invocation_id)
        return None

    def _stop_again(self, invocation: str) -> None:
        stop = self._stopped.get(invocation)
        if stop is not None:
            raise stop

    async def on_event_callback(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        if event.error_code and invocation_context.invocation_id in self._stopped:
            # ADK's error for a stop at a tool, not kept in the session: its Resume would
            # take it for the invocation's final answer and drop the call the stop held
            # back (once resolved, its subject freed, a halt cleared). Unkept, the session
            # reads as after a kill, and the start after the stop replays to that step.
            return event.model_copy(update={"partial": True})
        return None

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        name = tool.name
        if name in self.repeatable:
            return None  # ADK runs it, again on every replay
        if name not in self.policies:
            raise unguarded("Google ADK", name, _FIX % name)
        run = _current("Google ADK tool")
        self._stop_again(tool_context.invocation_id)
        answered = _answered(tool_context)
        if answered is not None:
            return answered  # ADK runs a call of the invocation again: what it answered
        confirmation = tool_context.tool_confirmation
        # A person's answer came back (the tool's require_confirmation, or the tool asked
        # itself with tool_context.request_confirmation()): the call is theirs to decide.
        needs_person = confirmation is not None or (
            await tool.check_require_confirmation(tool_args, tool_context) is True
        )
        if needs_person and confirmation is None:
            return None  # ADK asks the person; nothing runs until the answer comes back
        if needs_person and _canonical(_shown_arguments(tool_context)) != _canonical(tool_args):
            return dict(_OTHER_ARGUMENTS)  # the person confirmed another call: none runs
        policy = self.policies[name]
        if needs_person:
            policy = dataclasses.replace(policy, approval=True)

        async def perform(arguments: Any, *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                result = await tool.run_async(args=tool_args, tool_context=tool_context)
            return _jsonable(result)

        step = next_step_id(run, name)
        effect = policy.tool(name, perform)
        try:
            if confirmation is not None and needs_person:
                result = await self._confirmed(run, step, effect, tool_args, tool_context)
            else:
                result = await run.effect(step, effect, tool_args)
        except ApprovalDenied:
            return dict(_REJECTED)
        except EffectRefused as refused:
            return {"error": refused.message}
        except OnceLogError as stop:
            self._stopped[tool_context.invocation_id] = stop
            raise  # a stop: ADK's tool error handling never sees it
        except Exception as exc:  # an idempotent kind's error, recorded not done
            return {"error": f"{type(exc).__name__}: {exc}"}
        return result if isinstance(result, dict) else {"result": result}

    async def _confirmed(
        self,
        run: AsyncRun,
        step: str,
        effect: Any,
        arguments: dict[str, Any],
        context: ToolContext,
    ) -> Any:
        """The effect under an oncelog approval that ADK's confirmation decides: for
        exactly the arguments the person was shown, or not at all."""
        pending = asyncio.ensure_future(run.effect(step, effect, arguments))
        confirmation = context.tool_confirmation
        if confirmation is not None:
            request = await self._request(run.run_id, step, pending)
            if request is not None:
                decide = self.ledger.approve if confirmation.confirmed else self.ledger.deny
                await asyncio.to_thread(
                    decide, run.run_id, step, by=_DECIDED_BY, request=request,
                    note=f"ADK tool confirmation of call {context.function_call_id}",
                )  # fmt: skip
        return await pending

    async def _request(self, run_id: str, step: str, pending: asyncio.Future[Any]) -> int | None:
        """The id of the approval request ``pending`` asks, once the ledger holds it;
        None if the step needs none (replayed, or approved already)."""
        while not pending.done():
            asked = await asyncio.to_thread(self.ledger.approvals, "pending")
            for approval in asked:
                if approval.run_id == run_id and approval.step_id == step:
                    return approval.id
            await asyncio.sleep(0.05)
        return None


def _answered_call(events: list[Event], message: types.Content | None) -> str | None:
    """The invocation a message of function responses (an answer to a confirmation)
    continues: the one that made the calls it answers."""
    ids = {
        part.function_response.id
        for part in (message.parts or [] if message is not None else [])
        if part.function_response is not None and part.function_response.id
    }
    for event in events:
        for call in event.get_function_calls():
            if call.id in ids:
                return event.invocation_id
    return None


def _model_answer(event: Event) -> bool:
    """Whether an event is a model's answer: not one of the calls ADK makes itself to ask
    a person (a confirmation, a credential, an input), which are never model steps."""
    if event.content is None or event.content.role != "model":
        return False
    calls = event.get_function_calls()
    return not calls or any(not str(call.name).startswith(_ADK_ASKS) for call in calls)


def _finished(events: list[Event], invocation: str) -> bool:
    """Whether the session holds the invocation's final answer (not a pause for a
    person: a confirmation asked is a call, its placeholder a response)."""
    said = [
        e for e in events
        if e.invocation_id == invocation and e.author != "user" and e.content and e.content.parts
    ]  # fmt: skip
    if not said:
        return False
    last = said[-1]
    return (
        last.is_final_response()
        and not last.get_function_calls()
        and not (last.get_function_responses())
    )


def _recorded_answer(answer: LlmResponse) -> dict[str, Any]:
    """A model's answer as the run records it, with its token counts."""
    usage = answer.usage_metadata
    tokens = {} if usage is None else {
        "input_tokens": usage.prompt_token_count or 0,
        "output_tokens": usage.candidates_token_count or 0,
    }  # fmt: skip
    return {"response": answer.model_dump(mode="json", exclude_none=True), "usage": tokens}


def _input_digest(args_json: str) -> str | None:
    """The input digest a recorded model step was asked with: the session's answer takes
    that step's position without the request that asked it."""
    try:
        found = json.loads(args_json).get("input_digest")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def _recorded(said: Any) -> Any:
    """An effect that returns what the session recorded, without a call."""

    def perform(arguments: Any, *, idempotency_key: str) -> Any:
        return said

    return perform


def _placeholder(said: Any) -> bool:
    """ADK's answer to a call that waits for a confirmation: no call of the tool."""
    return isinstance(said, dict) and "requires confirmation" in str(said.get("error", ""))


def _answered(context: ToolContext) -> dict[str, Any] | None:
    """The session's response to this very call, if the tool answered it already; not
    a response that asked a person to confirm the call (ADK's gate's, or the tool's own
    after ``tool_context.request_confirmation()``): the call runs once they answered."""
    call = context.function_call_id
    for event in context.session.events:
        if call in event.actions.requested_tool_confirmations:
            continue
        for response in event.get_function_responses():
            if response.id == call and not _placeholder(response.response):
                return dict(response.response or {})
    return None


def _shown_arguments(context: ToolContext) -> Any:
    """The arguments ADK showed the person, in its confirmation request for this call."""
    for event in reversed(context.session.events):
        for call in event.get_function_calls():
            original = (
                (call.args or {}).get("originalFunctionCall") if call.name == _CONFIRM else None
            )
            if isinstance(original, dict) and original.get("id") == context.function_call_id:
                return original.get("args") or {}
    return None


def _said(content: types.Content | None) -> list[str]:
    return [p.text for p in (content.parts or [] if content is not None else []) if p.text]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return json.loads(json.dumps(value, default=repr))
