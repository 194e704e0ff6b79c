"""The mail tool and its finder against a mail system of the test's own (Dovecot and an
SMTP server, separate processes): an agent SIGKILLed around its email is restarted, and
the messages are counted in the Maildir, never in the ledger."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import oncelog
from oncelog import StepState
from oncelog.testing import CRASH_POINTS

from .conftest import require
from .support.launch import environment, python
from .support.mail_system import (
    DOVECOT_REASON,
    MailSystem,
    dovecot_is_installed,
    running_mail_system,
)

AGENT = Path(__file__).parent / "crash_agents" / "mail_agent.py"
DELAY = 1.0  # the archive gets every accepted message within this (here: before the 250)


@pytest.fixture
def mail() -> Iterator[MailSystem]:
    require(dovecot_is_installed(), DOVECOT_REASON)
    with running_mail_system() as system:
        yield system


@dataclass(frozen=True)
class Agent:
    ledger: Path
    run_id: str
    mail: MailSystem
    delivery_delay: float | None = DELAY

    def run(self, crash_at: str | None = None, kill_in_smtp: bool = False, *extra: str) -> int:
        argv = python(AGENT, "--ledger", self.ledger, "--run", self.run_id,
                      "--smtp-port", str(self.mail.smtp_port),
                      "--imap-port", str(self.mail.imap_port))  # fmt: skip
        if self.delivery_delay is not None:
            argv += ["--delivery-delay", str(self.delivery_delay)]
        if kill_in_smtp:
            argv += ["--kill-file", str(self.mail.kill_file)]
        argv += extra
        done = subprocess.run(argv, env=environment(crash_at), capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        # An agent armed to be killed in SMTP that sent nothing (its step was done) must
        # not leave its pid for the next one's message.
        self.mail.kill_file.unlink(missing_ok=True)
        assert done.returncode in (0, 3, -9), done.stderr[-3000:]
        return done.returncode

    def step(self) -> oncelog.StepRecord:
        with oncelog.open(str(self.ledger)) as ledger:
            return {step.step_id: step for step in ledger.steps(self.run_id)}["email"]

    def journal(self) -> list[str]:
        seq = self.step().seq
        with oncelog.open(str(self.ledger)) as ledger:
            return [entry.event for entry in ledger.journal(self.run_id) if entry.seq == seq]

    def sent(self) -> int:
        return len(self.mail.with_key(self.step().key))


Kill = tuple[str | None, bool]  # a crash point, or killed by the SMTP server before its 250
IN_SMTP: Kill = (None, True)

# (how it dies, whether the server had accepted the message)
KILLS = [
    pytest.param(("after_intent_commit@email", False), False, id="before-the-send"),
    pytest.param(IN_SMTP, True, id="stored-no-250-read"),
    pytest.param(("after_call@email", False), True, id="accepted-not-recorded"),
    pytest.param(("before_outcome_commit@email", False), True, id="outcome-not-committed"),
]


@pytest.mark.parametrize(("kill", "accepted"), KILLS)
def test_a_killed_send_is_settled_by_the_mailbox(
    tmp_path: Path, mail: MailSystem, kill: Kill, accepted: bool
) -> None:
    agent = Agent(tmp_path / "ledger.db", "refund-1", mail)
    assert agent.run(*kill) == -9
    assert agent.sent() == (1 if accepted else 0)
    assert agent.run() == 0  # the finder decided; no person needed
    step = agent.step()
    assert agent.sent() == 1
    assert (step.state, step.attempts) == (StepState.DONE, 1 if accepted else 2)
    assert ("probed" in agent.journal()) is accepted
    [message] = mail.with_key(step.key)
    assert step.result == {"message_id": message["Message-ID"], "to": ["ada@example.com"]}


def test_imap_down_at_the_probe_halts_for_a_person(tmp_path: Path, mail: MailSystem) -> None:
    agent = Agent(tmp_path / "ledger.db", "refund-2", mail)
    assert agent.run(crash_at="after_call@email") == -9
    mail.stop_imap()
    assert agent.run() == 3  # CANNOT_TELL: halted, nothing sent again
    assert agent.step().state is StepState.UNKNOWN
    assert agent.sent() == 1
    # The way out (docs/email.md): with IMAP back, a restart asks the finder again.
    mail.start_imap()
    assert agent.run() == 0
    assert agent.step().state is StepState.DONE
    assert agent.sent() == 1


def test_a_person_settles_what_the_finder_cannot(tmp_path: Path, mail: MailSystem) -> None:
    """Without a delivery delay, a message not found is not proof: a person decides."""
    agent = Agent(tmp_path / "ledger.db", "refund-3", mail, delivery_delay=None)
    assert agent.run(crash_at="after_intent_commit@email") == -9
    assert agent.run() == 3
    assert agent.sent() == 0
    with oncelog.open(str(agent.ledger)) as ledger:
        ledger.resolve(agent.run_id, "email", "not_done", by="test", note="not in the archive")
    assert agent.run() == 0
    assert agent.sent() == 1


def test_random_kills_send_each_email_once(tmp_path: Path, mail: MailSystem) -> None:
    seed = random.randrange(2**32)
    chosen = random.Random(seed)
    kills: list[Kill] = [(f"{point}@email", False) for point in CRASH_POINTS] + [IN_SMTP]
    for trial in range(8):
        agent = Agent(tmp_path / "ledger.db", f"trial-{trial}", mail)
        exits = [agent.run(*chosen.choice(kills)) for _ in range(chosen.randint(1, 2))]
        while exits[-1] == -9:
            exits.append(agent.run())
        assert exits[-1] == 0, (seed, trial, exits)  # never a halt
        assert agent.sent() == 1, (seed, trial, exits)


def test_a_send_in_doubt_is_found_at_once(tmp_path: Path) -> None:
    """The server stores the message and answers after the agent's SMTP timeout: the
    call fails inside DATA (in doubt), the finder is asked at once and finds it."""
    require(dovecot_is_installed(), DOVECOT_REASON)
    with running_mail_system(stall="slow@example.com") as mail:
        agent = Agent(tmp_path / "ledger.db", "refund-4", mail)
        assert agent.run(None, False, "--to", "slow@example.com", "--timeout", "1") == 0
        step = agent.step()
        assert (step.state, step.attempts, agent.sent()) == (StepState.DONE, 1, 1)
        assert "probed" in agent.journal()
