"""Each period of a subject claimed for a time (``once_for``) has its own key: a probe that
searches by key never takes the last period's effect for this one's. Agents are real
processes, SIGKILLed where a crash is the point; messages are counted in the Maildir of
the test's own mail system, posts at the marker provider's process."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import oncelog
from oncelog import markers

from .support.launch import environment, run_python
from .support.mail_system import MailSystem
from .test_mail_probe import Agent, mail
from .test_markers import AGENT, LINK_SECRET, marker_provider, start

__all__ = ["mail"]  # the fixture, used by name

# Claimed for a millisecond: a done claim has expired by the time the next period's
# process starts, and a claim in doubt never expires.
ONCE_FOR = "0.001"


def weekly(ledger: Path, week: int, mail: MailSystem) -> Agent:
    return Agent(ledger, f"digest-W{week:02d}", mail)


def test_a_digest_killed_before_its_send_is_sent_in_its_own_week(
    tmp_path: Path, mail: MailSystem
) -> None:
    ledger = tmp_path / "ledger.db"
    assert weekly(ledger, 1, mail).run(None, False, "--once-for", ONCE_FOR) == 0
    assert len(mail.messages()) == 1
    second = weekly(ledger, 2, mail)
    assert second.run("after_intent_commit@email", False, "--once-for", ONCE_FOR) == -9
    assert second.run(None, False, "--once-for", ONCE_FOR) == 0  # the finder decides
    assert len(mail.messages()) == 2  # week 1's message did not stand for week 2's
    first_key, second_key = weekly(ledger, 1, mail).step().key, second.step().key
    assert first_key != second_key
    assert len(mail.with_key(second_key)) == 1


def test_a_digest_killed_after_its_send_is_found_and_not_sent_again(
    tmp_path: Path, mail: MailSystem
) -> None:
    ledger = tmp_path / "ledger.db"
    assert weekly(ledger, 1, mail).run(None, False, "--once-for", ONCE_FOR) == 0
    second = weekly(ledger, 2, mail)
    assert second.run("after_call@email", False, "--once-for", ONCE_FOR) == -9
    assert second.run(None, False, "--once-for", ONCE_FOR) == 0
    assert len(mail.messages()) == 2
    step = second.step()
    assert (step.state, step.attempts) == (oncelog.StepState.DONE, 1)
    [message] = mail.with_key(step.key)
    assert step.result == {"message_id": message["Message-ID"], "to": ["ada@example.com"]}


def test_a_post_in_doubt_is_not_settled_by_the_last_periods(store_url: str, tmp_path: Path) -> None:
    """No kill: day 2's call fails in doubt before reaching the provider, and the probe,
    asked at once, must not find day 1's post under day 2's marker."""
    with marker_provider(tmp_path, lag=0.0) as provider:
        first = start(store_url, provider, None, "--once-for", ONCE_FOR)
        assert first.returncode == 0, first.stderr
        day_1 = json.loads(first.stdout)
        lost = run_day(store_url, provider.url, "day-2", "--once-for", ONCE_FOR,
                       "--lose-first", "--consistent-after", "0.2")  # fmt: skip
        # Not found under day 2's marker: in flight, sent again by a later start.
        assert lost.returncode == oncelog.EXIT_TRY_LATER, lost.stderr
        assert len(provider.messages()) == 1
        second = run_day(store_url, provider.url, "day-2", "--once-for", ONCE_FOR,
                         "--consistent-after", "0.2")  # fmt: skip
        assert second.returncode == 0, second.stderr
        posts = provider.messages()
        assert len(posts) == 2  # day 2's post was made, not taken from day 1
        assert json.loads(second.stdout) != day_1
        assert json.loads(second.stdout) == {"id": posts[1]["id"]}
        with oncelog.open(store_url) as ledger:
            [step] = ledger.steps("day-2")
        assert markers.stamped(posts[1]["text"]) is not None
        assert markers.stamped(posts[0]["text"]) != markers.stamped(posts[1]["text"])
        assert step.state is oncelog.StepState.DONE


def test_killed_in_flight_the_restart_keeps_its_recorded_key(
    store_url: str, tmp_path: Path
) -> None:
    """A killed period's restart finds its own post by the key its intent recorded."""
    with marker_provider(tmp_path, lag=0.0) as provider:
        assert start(store_url, provider, None, "--once-for", ONCE_FOR).returncode == 0
        killed = run_day(store_url, provider.url, "day-2", "--once-for", ONCE_FOR,
                         crash_at="after_call@post")  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        again = run_day(store_url, provider.url, "day-2", "--once-for", ONCE_FOR)
        assert again.returncode == 0, again.stderr
        posts = provider.messages()
        assert len(posts) == 2
        assert json.loads(again.stdout) == {"id": posts[1]["id"]}


def run_day(
    store_url: str, provider: str, run_id: str, *options: str, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = environment(crash_at=crash_at, ONCELOG_LINK_SECRET=LINK_SECRET)
    return run_python(AGENT, store_url, run_id, provider, *options, env=env)
