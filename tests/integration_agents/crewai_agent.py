"""A CrewAI crew whose tool sends an email through the fake provider process, plain or
guarded by oncelog, with a scripted model (no network).

    python -m tests.integration_agents.crewai_agent --ledger L --provider URL
        --model-calls M --request R [--guarded] [--path native|react]
        [--process sequential|hierarchical|flow] [--fault NAME] [--probe]
        [--guardrail] [--flags DIR]

``--fault`` is what goes wrong, once (a file in ``--flags`` remembers it happened):
``tool-raises`` (the tool raises after the provider sent the email), ``model-error`` (the
model call after the tool's result raises), ``kill`` (the provider SIGKILLs this process
after sending the email, before answering). ``--guardrail`` gives the task a guardrail
that refuses the first answer, so CrewAI re-runs the task with the refusal as input.
Prints the crew's output as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from crewai import Agent, Crew, Process, Task
from crewai.flow.flow import Flow, start
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import crewai as oncelog_crewai

from .effect_log import count_model_call, post_effect

TO, BODY = "ada@example.com", "your receipt"


class ScriptedLLM(BaseLLM):
    """Answers as a real model would: asks for the email until it has the tool's result,
    then answers; through native tool calls or ReAct text. With ``fail_once`` set, the
    first call after a tool result raises, as a provider's 500 would."""

    native: bool = True
    calls_file: str = ""
    fail_once: str = ""  # a flag file: present once the failure happened

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        count_model_call(self.calls_file)
        offered = json.dumps([messages, tools], default=str)
        if "delegate_work_to_coworker" in offered or "Delegate work to coworker" in offered:
            if "emailed ada" not in json.dumps(messages, default=str):
                return _delegate(self.native and bool(tools))  # a hierarchical crew's manager
            return "Thought: the clerk did it\nFinal Answer: emailed ada"
        if _told(messages):
            if self.fail_once and not Path(self.fail_once).exists():
                Path(self.fail_once).write_text("failed")
                raise RuntimeError("the model provider answered 500")
            return "Thought: I now know the final answer\nFinal Answer: emailed ada"
        arguments = {"to": TO, "body": BODY}
        if self.native and tools:
            call_id = f"call_{uuid.uuid4().hex[:12]}"  # new at every call, as a model's
            function = {"name": "send_email", "arguments": json.dumps(arguments)}
            return [{"id": call_id, "type": "function", "function": function}]
        return (
            "Thought: I must email the customer\nAction: send_email\n"
            f"Action Input: {json.dumps(arguments)}"
        )

    def supports_function_calling(self) -> bool:
        return self.native

    def supports_stop_words(self) -> bool:
        return not self.native

    def get_context_window_size(self) -> int:
        return 8192


def _told(messages: Any) -> bool:
    """Whether the conversation holds the email's receipt: after an error, a model asks
    for the tool again."""
    return "sent fx_" in json.dumps(messages, default=str)


def _delegate(native: bool) -> Any:
    arguments = {"task": "email ada her receipt", "context": "ticket 4711",
                 "coworker": "Billing clerk"}  # fmt: skip
    if native:
        function = {"name": "delegate_work_to_coworker", "arguments": json.dumps(arguments)}
        return [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": function}]
    return (
        "Thought: the clerk emails\nAction: Delegate work to coworker\n"
        f"Action Input: {json.dumps(arguments)}"
    )


def main() -> None:
    args = parser().parse_args()
    flags = Path(args.flags)
    flags.mkdir(parents=True, exist_ok=True)
    request_id = args.request

    def post(to: str, body: str, key: str) -> Any:
        kill = args.fault == "kill" and _first(flags / "killed")
        payload = {"tool": "send_email", "to": to, "body": body}
        receipt = post_effect(args.provider, request_id, payload, key, kill=kill)
        if args.fault == "tool-raises" and _first(flags / "raised"):
            raise ConnectionError("the connection was reset after the request was sent")
        return receipt

    @tool("send_email")
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        key = current_idempotency_key() if args.guarded else uuid.uuid4().hex
        return f"sent fx_{post(to, body, key)['effect_id']}"

    send_email.cache_function = lambda *_: False  # cache=False: every call is sent
    llm = ScriptedLLM(
        model="scripted", native=args.path == "native", calls_file=args.model_calls,
        fail_once=str(flags / "model-failed") if args.fault == "model-error" else "",
    )  # fmt: skip
    crew = build_crew(args.process, llm, send_email, guardrail=args.guardrail)
    ledger = oncelog.open(args.ledger)

    def probe(key: str, arguments: Any) -> oncelog.ProbeAnswer:
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(f"{args.provider}/effects?{query}", timeout=30) as answer:
            found = json.loads(answer.read())["found"]
        return oncelog.Found(f"sent fx_{found[0]['effect_id']}") if found else oncelog.NOT_FOUND

    kinds = {"send_email": Policy("create", probe=probe if args.probe else None)}
    guard = oncelog_crewai.Guard(ledger, crew="billing", kinds=kinds)

    def kickoff() -> str:
        if args.process == "flow":
            return str(BillingFlow(crew, guard if args.guarded else None, request_id).kickoff())
        if args.guarded:
            return str(guard.kickoff(crew, request=request_id).raw)
        return str(getattr(crew.kickoff(), "raw", ""))

    oncelog.run_main(lambda: print(json.dumps(kickoff())))


def _first(flag: Path) -> bool:
    """True the first time only: the fault happens once."""
    if flag.exists():
        return False
    flag.write_text("done")
    return True


def build_crew(process: str, llm: BaseLLM, send_email: Any, *, guardrail: bool) -> Crew:
    clerk = Agent(
        role="Billing clerk", goal="Email receipts", backstory="Careful.",
        llm=llm, tools=[send_email], allow_delegation=False,
    )  # fmt: skip
    task = Task(
        description="Email ada@example.com her receipt for ticket 4711.",
        expected_output="What was sent.", agent=clerk,
        guardrail=_refuse_first_answer if guardrail else None, guardrail_max_retries=1,
    )  # fmt: skip
    if process == "hierarchical":
        task.agent = None
        return Crew(agents=[clerk], tasks=[task], process=Process.hierarchical, manager_llm=llm)
    return Crew(agents=[clerk], tasks=[task], process=Process.sequential)


_answers: list[str] = []


def _refuse_first_answer(output: Any) -> tuple[bool, Any]:
    """A guardrail that sends the task back once: the re-run asks the model again."""
    _answers.append(output.raw)
    if len(_answers) == 1:
        return False, "say which address was emailed"
    return True, output.raw


# CrewAI reads the annotation itself, which ``from __future__ import annotations`` leaves a
# string it refuses.
_refuse_first_answer.__annotations__["return"] = tuple[bool, Any]


class BillingFlow(Flow[dict[str, Any]]):
    def __init__(self, crew: Crew, guard: Any, request: str) -> None:
        super().__init__()
        self.crew, self.guard, self.request = crew, guard, request

    @start()
    def bill(self) -> str:
        if self.guard is not None:
            return str(self.guard.kickoff(self.crew, request=self.request).raw)
        return str(getattr(self.crew.kickoff(), "raw", ""))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--provider", "--model-calls", "--request", "--flags"):
        parser.add_argument(name, required=True)
    parser.add_argument("--guarded", action="store_true")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--guardrail", action="store_true")
    parser.add_argument("--path", choices=["native", "react"], default="native")
    parser.add_argument("--process", choices=["sequential", "hierarchical", "flow"],
                        default="sequential")  # fmt: skip
    parser.add_argument("--fault", choices=["none", "tool-raises", "model-error", "kill"],
                        default="none")  # fmt: skip
    return parser


if __name__ == "__main__":
    main()
