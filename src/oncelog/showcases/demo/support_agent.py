"""A support agent that resolves a ticket in 20 steps, plainly or with oncelog.

    python -m oncelog.showcases.demo.support_agent plain|oncelog --services services.json
        [--ledger PATH] [--conversation ID] [--email ADDRESS] [--message TEXT]

A customer writes in: their yearly renewal failed, they updated their card, please try
again. The agent reads the customer and their history, opens a ticket, charges the
renewal through Stripe, emails the customer, notes everything on the ticket and closes
it. Model calls are simulated (``model.py``); everything else is a real call to a real
service (``clients.py``), whose addresses ``--services`` names.

The 20 steps are written once, in ``handle``, against three verbs: ``llm``, ``read``
and ``effect``. ``plain`` runs them straight through, keeping its progress in memory
like most agents: a restarted process begins again at step 1. ``oncelog`` runs the very
same code inside ``ledger.run(conversation)``, with each effect declared to the ledger:
a restarted process replays what was recorded and goes on from the first new step.

``SUPPORT_AGENT_KILL_AFTER=STEP`` makes the plain agent SIGKILL itself right after that
step, the way ``ONCELOG_CRASH_AT=after_call@STEP`` does to the oncelog one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import stripe

import oncelog
from oncelog.probes.mail import mail_tool
from oncelog.probes.stripe import find_payment

from . import model
from .clients import Clients, Services

KILL_AFTER_ENV = "SUPPORT_AGENT_KILL_AFTER"

# fmt: off
PLAN = (
    "classify",          #  1  llm
    "find_customer",     #  2  read   Stripe
    "recent_charges",    #  3  read   Stripe
    "open_tickets",      #  4  read   help desk
    "decide",            #  5  llm
    "open_ticket",       #  6  effect help desk, create
    "saved_card",        #  7  read   Stripe
    "confirm_charge",    #  8  llm
    "charge",            #  9  effect Stripe, payment
    "payment_status",    # 10  read   Stripe
    "draft_email",       # 11  llm
    "send_email",        # 12  effect SMTP, create
    "record_payment",    # 13  effect help desk, upsert
    "summarize",         # 14  llm
    "add_note",          # 15  effect help desk, create
    "reread_ticket",     # 16  read   help desk
    "check_resolution",  # 17  llm
    "close_ticket",      # 18  effect help desk, upsert
    "verify_closed",     # 19  read   help desk
    "wrap_up",           # 20  llm
)
# fmt: on


@dataclass(frozen=True)
class Request:
    """What the queue hands the agent: the conversation, who wrote, and what they said."""

    conversation: str
    email: str
    message: str


class Tools(NamedTuple):
    """The calls that change something in the world: plain methods, or oncelog tools."""

    open_ticket: Callable[..., dict[str, Any]]
    charge: Callable[..., dict[str, Any]]
    send_email: Callable[..., dict[str, Any]]
    update_ticket: Callable[..., dict[str, Any]]
    add_comment: Callable[..., dict[str, Any]]


class Steps(Protocol):
    """How the agent takes a step: ``oncelog.Run``, or ``Unrecorded`` without a ledger."""

    def llm(self, step_id: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any: ...

    def read(self, step_id: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any: ...

    def effect(self, step_id: str, tool: Any, /, *args: Any, **kwargs: Any) -> Any: ...


def handle(steps: Steps, tools: Tools, world: Clients, request: Request) -> dict[str, Any]:
    """The agent's 20 steps, in ``PLAN`` order."""
    desk, payments = world.desk, world.payments
    triage = steps.llm("classify", model.classify, request.message)
    customer = steps.read("find_customer", payments.find_customer, request.email)
    charges = steps.read("recent_charges", payments.recent_charges, customer["id"])
    tickets = steps.read("open_tickets", desk.tickets_of, request.email)
    decision = steps.llm("decide", model.decide, triage, charges, tickets)
    ticket = steps.effect(
        "open_ticket", tools.open_ticket, request.email, decision["subject"], decision["body"]
    )
    card = steps.read("saved_card", payments.saved_card, customer["id"])
    amount = steps.llm("confirm_charge", model.confirm_charge, customer, card)
    payment = steps.effect("charge", tools.charge, customer["id"], amount["cents"], card)
    status = steps.read("payment_status", payments.payment_status, payment["id"])
    draft = steps.llm("draft_email", model.draft_email, customer, payment, status)
    email = steps.effect(
        "send_email", tools.send_email, request.email, draft["subject"], draft["body"]
    )
    steps.effect("record_payment", tools.update_ticket, ticket["id"], {"payment": payment["id"]})
    summary = steps.llm("summarize", model.summarize, ticket, payment, email)
    steps.effect("add_note", tools.add_comment, ticket["id"], summary["note"])
    ticket = steps.read("reread_ticket", desk.ticket, ticket["id"])
    verdict = steps.llm("check_resolution", model.check_resolution, ticket)
    new_status = "solved" if verdict["resolved"] else "open"
    steps.effect("close_ticket", tools.update_ticket, ticket["id"], {"status": new_status})
    ticket = steps.read("verify_closed", desk.ticket, ticket["id"])
    result: dict[str, Any] = steps.llm("wrap_up", model.wrap_up, ticket)
    return result


# --- without a ledger -----------------------------------------------------------------


class Unrecorded:
    """Steps without a ledger: each one is simply called. What the agent has done lives
    in this process's memory and dies with it."""

    def __init__(self, kill_after: str | None = None) -> None:
        self.kill_after = kill_after

    def llm(self, step_id: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return self._call(step_id, fn, args, kwargs)

    def read(self, step_id: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return self._call(step_id, fn, args, kwargs)

    def effect(self, step_id: str, tool: Any, /, *args: Any, **kwargs: Any) -> Any:
        return self._call(step_id, tool, args, kwargs)

    def _call(
        self, step_id: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        result = fn(*args, **kwargs)
        if step_id == self.kill_after:  # the demo's eviction, right after the service said OK
            os.kill(os.getpid(), signal.SIGKILL)
        return result


def plain_tools(world: Clients) -> Tools:
    return Tools(
        open_ticket=world.desk.open_ticket,
        charge=world.payments.charge,
        send_email=world.mail.send_email,
        update_ticket=world.desk.update_ticket,
        add_comment=world.desk.add_comment,
    )


# --- with oncelog ---------------------------------------------------------------------


def oncelog_tools(ledger: oncelog.Ledger, world: Clients) -> Tools:
    """The same calls, declared to the ledger: each one's intent is durable before it is
    made and its outcome right after, and it receives an idempotency key of its own.
    After a restart, an effect whose outcome was never recorded is not called again
    blindly: the charge asks Stripe (its probe finds the payment by its key), the email
    asks the mail server's store when it can be searched, the updates are safe to repeat
    (``upsert``), and the rest halt for a person."""
    return Tools(
        open_ticket=ledger.tool(kind="create", name="open_ticket")(world.desk.open_ticket),
        charge=ledger.tool(
            kind="payment",
            name="charge",
            probe=find_payment,
            dedupe_window=timedelta(hours=24),  # how long Stripe honours an idempotency key
            refusals=(stripe.CardError,),  # a decline: definitely not charged
        )(world.payments.charge),
        # Its probe searches the mail server's store over IMAP, when Dovecot serves it.
        send_email=mail_tool(name="send_email", sender=world.mail.sender, finder=world.mail.finder),
        update_ticket=ledger.tool(kind="upsert", name="update_ticket")(world.desk.update_ticket),
        add_comment=ledger.tool(kind="create", name="add_comment")(world.desk.add_comment),
    )


def with_oncelog(world: Clients, request: Request, ledger_url: str | None) -> dict[str, Any]:
    with oncelog.open(ledger_url) as ledger:
        tools = oncelog_tools(ledger, world)
        # The run is named by the conversation, which comes from outside the process:
        # the restarted process finds the same run.
        with ledger.run(request.conversation, plan=PLAN) as run:
            return handle(Logged(run), tools, world, request)


# --- the process ----------------------------------------------------------------------


class Logged:
    """Prints each step as it starts, so a killed process's log shows where it was."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    def llm(self, step_id: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self._say(step_id)
        return self.steps.llm(step_id, fn, *args, **kwargs)

    def read(self, step_id: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self._say(step_id)
        return self.steps.read(step_id, fn, *args, **kwargs)

    def effect(self, step_id: str, tool: Any, /, *args: Any, **kwargs: Any) -> Any:
        self._say(step_id)
        return self.steps.effect(step_id, tool, *args, **kwargs)

    @staticmethod
    def _say(step_id: str) -> None:
        print(f"step {PLAN.index(step_id) + 1}/{len(PLAN)} {step_id}", flush=True)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="the oncelog demo's support agent")
    parser.add_argument("mode", choices=["plain", "oncelog"])
    parser.add_argument(
        "--services", type=Path, required=True, help="the services' addresses (JSON)"
    )
    parser.add_argument("--ledger", default=None, help="oncelog's ledger (default: $ONCELOG_URL)")
    parser.add_argument("--conversation", default="conv-4711")
    parser.add_argument("--email", default="ada@example.com")
    parser.add_argument(
        "--message",
        default="My renewal payment failed. I have updated my card: please try again.",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    request = Request(args.conversation, args.email, args.message)
    world = Clients.connect(Services.load(args.services))
    if args.mode == "plain":
        steps = Logged(Unrecorded(kill_after=os.environ.get(KILL_AFTER_ENV)))
        print(json.dumps(handle(steps, plain_tools(world), world, request)), flush=True)
        return
    oncelog.run_main(lambda: print(json.dumps(with_oncelog(world, request, args.ledger))))


if __name__ == "__main__":
    main()
