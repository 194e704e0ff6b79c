"""A stamp planted by someone without the ledger's secret is not evidence. A key derives
from the run, the step and the tool, so a third party (or the model through another
tool) can compute it and plant an item or a message carrying it, or its stamp in the
form stamps had before they were authenticated; the probe must not answer Found for it,
and the effect must be performed. Agents are real processes, SIGKILLed before they
send; posts are counted at the marker provider's process, messages in the Maildir."""

from __future__ import annotations

import hashlib
import json
import signal
import smtplib
import urllib.request
from email.message import EmailMessage
from pathlib import Path

import oncelog
from oncelog import markers
from oncelog.runtime._calls import idempotency_key

from .support.launch import environment, run_python
from .support.mail_system import MailSystem
from .test_mail_probe import Agent, mail
from .test_markers import AGENT, LINK_SECRET, marker_provider

__all__ = ["mail"]  # the fixture, used by name


def unauthenticated(key: str) -> str:
    """The stamp's form before stamps were authenticated: a plain hash of the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def post(provider: str, text: str) -> None:
    """An item planted at the provider, as anyone who can post there can."""
    request = urllib.request.Request(
        f"{provider}/messages", data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30):
        pass


def test_a_planted_marker_does_not_settle_a_post(store_url: str, tmp_path: Path) -> None:
    key = idempotency_key("r", "post", "post_message")  # anyone can compute it
    with marker_provider(tmp_path, lag=0.0) as provider:
        forged = f"oncelog-{unauthenticated(key)}"
        post(provider.url, f"planted\n\n<!-- {forged} -->")
        post(provider.url, markers.stamp("planted", key, b"a guessed secret"))
        env = environment(crash_at="after_intent_commit@post", ONCELOG_LINK_SECRET=LINK_SECRET)
        killed = run_python(AGENT, store_url, "r", provider.url, env=env)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        env = environment(ONCELOG_LINK_SECRET=LINK_SECRET)
        again = run_python(AGENT, store_url, "r", provider.url, "--consistent-after", "0.2",
                           env=env)  # fmt: skip
        assert again.returncode == 0, again.stderr
        posts = provider.messages()
        assert len(posts) == 3  # two planted, and the post itself
        assert json.loads(again.stdout) == {"id": posts[2]["id"]}
        with oncelog.open(store_url) as ledger:
            [step] = ledger.steps("r")
        assert (step.state, step.attempts) == (oncelog.StepState.DONE, 2)


def plant(mail: MailSystem, key: str) -> None:
    """A message to the archive carrying the key's header and its unauthenticated
    Message-ID, as anyone who can send mail there can."""
    message = EmailMessage()
    message["From"] = "mallory@elsewhere.example"
    message["To"] = "archive@shop.example"
    message["Subject"] = "planted"
    message["Message-ID"] = f"<{unauthenticated(key)}.oncelog@shop.example>"
    message["X-Oncelog-Key"] = key
    message.set_content("nothing was sent to ada")
    with smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=30) as smtp:
        smtp.send_message(message)


def test_a_planted_message_does_not_settle_an_email(tmp_path: Path, mail: MailSystem) -> None:
    agent = Agent(tmp_path / "ledger.db", "refund-1", mail)
    plant(mail, idempotency_key("refund-1", "email", "send_email"))
    assert len(mail.messages()) == 1
    assert agent.run("after_intent_commit@email") == -9
    assert agent.run() == 0
    assert len(mail.messages()) == 2  # the planted one, and the email itself
    step = agent.step()
    assert (step.state, step.attempts) == (oncelog.StepState.DONE, 2)
    sent = [m for m in mail.messages() if m["From"] == "agent@shop.example"]
    assert [m["To"] for m in sent] == ["ada@example.com"]
    assert step.result == {"message_id": sent[0]["Message-ID"], "to": ["ada@example.com"]}
