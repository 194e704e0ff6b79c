"""``oncelog demo``: the incident, twice. A support agent is killed at step 12 of 20,
right after the customer's email was accepted, and restarted; once without a ledger,
once with oncelog. Each scenario gets fresh services in a folder of its own; the counts
come from those services' records."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import oncelog
from oncelog.testing import CRASH_ENV

from . import DemoFailed, records
from .imap import dovecot
from .person import settle_in_doubt
from .services import Processes, add_customer, charges, services
from .supervisor import Death, Supervisor
from .support_agent import KILL_AFTER_ENV
from .timeline import timeline

CONVERSATION = "conv-4711"
CUSTOMER = ("ada@example.com", "Ada Lovelace")

Say = Callable[[str], None]


@dataclass(frozen=True)
class Scenario:
    mode: str  # the agent's mode, and the scenario's folder
    title: str
    deaths: tuple[Death, ...]


PLAIN = Scenario(
    "plain",
    "without a ledger",
    (Death({KILL_AFTER_ENV: "send_email"}, "right after the SMTP server accepted the email"),),
)
WITH_ONCELOG = Scenario(
    "oncelog",
    "with oncelog",
    (
        Death(
            {CRASH_ENV: "after_call@charge"},
            "after Stripe took the payment, before the ledger recorded it",
        ),
        Death(
            {CRASH_ENV: "after_call@send_email"},
            "after the SMTP server accepted the email, before the ledger recorded it",
        ),
    ),
)


def play(
    scenario: Scenario,
    folder: Path,
    processes: Processes,
    say: Say,
    typed: list[str],
    imap: str | None = None,
) -> records.Counts:
    folder.mkdir(parents=True)
    ledger = str(folder / "ledger.db")
    argv = [sys.executable, "-m", "oncelog.showcases.demo.support_agent", scenario.mode]
    argv += ["--services", str(folder / "services.json"), "--conversation", CONVERSATION]
    argv += ["--email", CUSTOMER[0]]
    if scenario.mode == "oncelog":
        argv += ["--ledger", ledger]
    say(f"\n== {scenario.title}: conversation {CONVERSATION}, in {folder}")
    with services(folder, processes, imap) as found:
        say(
            f"  services  localstripe {found.stripe}, SMTP {found.smtp_host}:{found.smtp_port}, "
            f"tickets {found.tickets}"
        )
        add_customer(found, *CUSTOMER)
        Supervisor(
            argv,
            folder / "logs",
            processes,
            say,
            scenario.deaths,
            on_halt=lambda: settle_in_doubt(ledger, folder, say, typed),
        ).run_until_completed()
        records.save_charges(folder, charges(found))
    return records.counts(folder)


def table(plain: records.Counts, guarded: records.Counts) -> list[str]:
    rows = [
        ("tickets", "help desk, tickets.db", plain.tickets, guarded.tickets),
        ("emails", "SMTP server, mail/", plain.emails, guarded.emails),
        ("charges", "localstripe, stripe API", plain.charges, guarded.charges),
    ]
    lines = [f"\n== what the services recorded{'':<14}{PLAIN.title:>18}{WITH_ONCELOG.title:>15}"]
    for name, source, without, with_ in rows:
        lines.append(f"  {name:<9}({source}){'':<{29 - len(source)}}{without:>18}{with_:>15}")
    return lines


def mail_probe_command(wanted: bool, say: Say) -> str | None:
    """Dovecot's command if the mail probe is on, having said which path the email in
    doubt takes and why."""
    command = dovecot() if wanted else None
    if command is not None:
        say("mail probe on: Dovecot serves the SMTP server's store over IMAP, and the email in")
        say("  doubt is settled by searching it for the message's key (--no-mail-probe: a person)")
    elif wanted:
        say("mail probe off: Dovecot is not installed (Debian: apt-get install dovecot-imapd),")
        say(
            "  so the mail server's store cannot be searched: the email in doubt waits for a person"
        )
    else:
        say("mail probe off (--no-mail-probe): the email in doubt waits for a person")
    return command


def run_demo(out: Path, say: Say, mail_probe: bool = True) -> None:
    """Both scenarios, in ``out`` (which must exist and be empty); with ``mail_probe``
    the email in doubt is settled by the mail probe where Dovecot is installed."""
    processes = Processes(out / "processes.json")
    typed: list[str] = []  # by the operator the demo plays
    imap = mail_probe_command(mail_probe, say)
    plain = play(PLAIN, out / PLAIN.mode, processes, say, typed)
    guarded = play(WITH_ONCELOG, out / WITH_ONCELOG.mode, processes, say, typed, imap)
    for line in table(plain, guarded):
        say(line)
    ledger = out / WITH_ONCELOG.mode / "ledger.db"
    say(f"\n== the oncelog run's timeline, from its journal ({ledger})")
    with oncelog.open(str(ledger)) as opened:
        for line in timeline(opened.journal(CONVERSATION, limit=10_000)):
            say(line)
    if not typed:
        say("\n== no person was needed: the probes settled every effect in doubt")
    else:
        say("\n== what a real operator would have typed where the demo played one (then the")
        say("   supervisor restarted the agent, which replayed and went on)")
    for command in typed:
        say(f"  {command}")
    if guarded != records.Counts(1, 1, 1):
        raise DemoFailed(f"with oncelog the services recorded {guarded}; please report this")
