"""Attacks on the shipped failure classifiers: the provider performs the POST, and the
failure the client raises afterwards comes from connecting somewhere else (a redirect's
target) or again (a retry after a dropped connection or a 503) and is refused. A refused
connection then says nothing about the request: it was performed.

The provider (``support/answering_provider.py``) is its own process and counts every POST
it performed in a file before it answers; the agent (``attack_agents/posting.py``) is a
real process with a real client. Nothing is counted from the ledger.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

import oncelog

from .support.launch import environment, python, run_python
from .test_recovery import refused_port

PROVIDER = Path(__file__).parent / "support" / "answering_provider.py"
POSTING = Path(__file__).parent / "attack_agents" / "posting.py"


@dataclass(frozen=True)
class Answering:
    url: str
    performed: Path
    process: subprocess.Popen[str]

    def count(self) -> int:
        return len(self.performed.read_text().splitlines()) if self.performed.exists() else 0

    def listen_again(self) -> None:
        self.process.send_signal(signal.SIGUSR1)


@contextmanager
def answering(folder: Path, answer: str) -> Iterator[Answering]:
    performed = folder / "performed"
    command = python(PROVIDER, "--performed", performed, "--answer", answer, "--to", refused_port())
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("PORT "), line
            yield Answering(f"http://127.0.0.1:{int(line.split()[1])}/pay", performed, process)
        finally:
            process.kill()


def post(store_url: str, provider: Answering, *options: str) -> tuple[int, str]:
    done = run_python(POSTING, store_url, "r", provider.url, *options, env=environment())
    return done.returncode, done.stdout + done.stderr


def charge_step(store_url: str) -> oncelog.StepRecord:
    with oncelog.open(store_url) as ledger:
        [step] = ledger.steps("r")
    return step


@pytest.mark.parametrize("client", ["requests", "urllib", "httpx"])
@pytest.mark.parametrize("status", ["302", "303"])
def test_a_redirect_to_a_refused_port_is_in_doubt_not_retried(
    store_url: str, tmp_path: Path, client: str, status: str
) -> None:
    """The provider performs the POST and redirects to a port that refuses: under a retry
    policy of 3 the payment was made 3 times and recorded failed. It is in doubt: made
    once, and the run halts for a person, at every restart."""
    with answering(tmp_path, status) as provider:
        for _ in range(2):
            code, out = post(store_url, provider, "--client", client, "--attempts", "3")
            assert code == oncelog.EXIT_HALTED, out
            assert provider.count() == 1
    step = charge_step(store_url)
    assert (step.state, step.attempts) == (oncelog.StepState.UNKNOWN, 1)


@pytest.mark.parametrize("answer", ["drop", "503"])
def test_a_urllib3_retry_refused_after_sending_is_in_doubt(
    store_url: str, tmp_path: Path, answer: str
) -> None:
    """urllib3's ``Retry`` sends the POST again after a dropped connection or a 503; the
    provider, having performed it, refuses the resend's connection. Classified not
    performed, the step was left to be made again and each restart paid again."""
    with answering(tmp_path, answer) as provider:
        for _ in range(2):
            code, out = post(store_url, provider, "--client", "requests", "--urllib3-retries", "3")
            assert code == oncelog.EXIT_HALTED, out
            assert provider.count() == 1
            provider.listen_again()
    assert charge_step(store_url).state is oncelog.StepState.UNKNOWN


def test_httpx_transport_retries_only_connecting(store_url: str, tmp_path: Path) -> None:
    """httpcore retries a connection that could not be made, never a request it sent: a
    dropped connection after the POST is in doubt, with ``retries=3`` as without."""
    with answering(tmp_path, "drop") as provider:
        code, out = post(store_url, provider, "--client", "httpx", "--httpx-retries", "3")
        assert code == oncelog.EXIT_HALTED, out
        assert provider.count() == 1
    assert charge_step(store_url).state is oncelog.StepState.UNKNOWN
