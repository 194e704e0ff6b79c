"""Attacks on what a subject promises (``once_per``): one effect per subject, whichever run
asks for it, under kills, restarts and retries under new run ids.

The agent (``subject_agents/refunder.py``) refunds one order through a provider process
that ignores idempotency keys, so its records count every request that reached it: what
happened in the world, not what the ledger says. Two runs with different ids ask for the
same refund, one after the other or at the same moment, each SIGKILLed at random and
started again.

``ONCELOG_SUBJECT_TRIALS`` sets how many races each store runs (default 3; the issue asks
for 100, run by hand: ``ONCELOG_SUBJECT_TRIALS=100 pytest tests/test_attack_subjects.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import oncelog

from .support.launch import environment, python, run_python
from .support.provider_process import Provider, running_provider

REFUNDER = Path(__file__).parent / "subject_agents" / "refunder.py"
TRIALS = int(os.environ.get("ONCELOG_SUBJECT_TRIALS", "3"))
KILLING_CYCLES = 4  # cycles whose processes may be killed; later ones run to their end
MAX_CYCLES = 40  # a race that never ends is a failure, not a hang
TOOL_SLEEP = "0.02"
# What a start may end with: done, killed, another run holds the subject (75 live, 3 in
# doubt in a dead one).
ENDINGS = (0, -signal.SIGKILL, 75, 3)


def refund(
    ledger: str,
    run_id: str,
    provider: Provider,
    order: str,
    *options: str,
    crash_at: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """One start of the refunder to its end."""
    return run_python(
        REFUNDER, ledger, run_id, provider.url, order, "--tool-sleep", TOOL_SLEEP, *options,
        env=environment(crash_at),
    )  # fmt: skip


def performed(provider: Provider, *runs: str) -> list[dict[str, object]]:
    """The provider's answers for every refund it performed for ``runs``."""
    return [effect.response for run in runs for effect in provider.effects(run)]


def test_a_retry_under_a_new_run_id_gets_the_first_runs_result(
    store_url: str, tmp_path: Path
) -> None:
    """The caller retries with a fresh request id: the second run sends nothing and gets
    the first run's result; its journal names the run and step that did it."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        first = refund(store_url, "request-1", provider, "42")
        again = refund(store_url, "request-2", provider, "42")
        assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
        [answer] = performed(provider, "request-1", "request-2")
        assert provider.requests("request-2") == []
    assert json.loads(first.stdout) == json.loads(again.stdout) == answer
    with oncelog.open(store_url) as ledger:
        [intent] = [e for e in ledger.iter_journal("request-2") if e.event == "intent"]
        assert "'request-1'" in str(intent.data["reason"])
        assert ledger.verify().ok


def test_a_subject_in_doubt_in_a_dead_run_sends_nothing_until_a_person_frees_it(
    store_url: str, tmp_path: Path
) -> None:
    """Run a is killed just after its intent and halts in doubt on its restart (no probe).
    Run b refuses to act while a holds the subject in doubt, naming it; a person decides
    a's refund was not done, which frees the subject: b refunds, and a's restart then gets
    b's result."""
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        killed = refund(store_url, "a", provider, "7", crash_at="after_intent_commit@refund")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        halted = refund(store_url, "a", provider, "7", "--no-probe")
        assert halted.returncode == 3, halted.stderr
        held = refund(store_url, "b", provider, "7")
        assert held.returncode == 3, held.stderr
        assert "SubjectInDoubt" in held.stderr
        assert "run a, step refund" in held.stderr
        assert performed(provider, "a", "b") == []
        with oncelog.open(store_url) as ledger:
            ledger.resolve("a", "refund", "not_done", by="ops")
        freed = refund(store_url, "b", provider, "7")
        resumed = refund(store_url, "a", provider, "7")
        assert (freed.returncode, resumed.returncode) == (0, 0), freed.stderr + resumed.stderr
        [answer] = performed(provider, "a", "b")
        assert provider.requests("a") == []
    assert json.loads(freed.stdout) == json.loads(resumed.stdout) == answer
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok


def race(store_url: str, provider: Provider, order: str, rng: random.Random) -> dict[str, str]:
    """Runs ``a-ORDER`` and ``b-ORDER`` refund ``order`` at the same moment, each killed
    after a random delay in the first cycles, and are started again until both complete;
    what each printed last."""
    runs, printed = (f"a-{order}", f"b-{order}"), dict[str, str]()
    for cycle in range(MAX_CYCLES):
        pending = [run for run in runs if run not in printed]
        if not pending:
            return printed
        started = {
            run: subprocess.Popen(
                python(REFUNDER, store_url, run, provider.url, order, "--tool-sleep", TOOL_SLEEP),
                env=environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for run in pending
        }
        if cycle < KILLING_CYCLES:
            kills = sorted((rng.uniform(0.05, 0.9), run) for run in pending if rng.random() < 0.7)
            began = time.monotonic()
            for at, run in kills:
                time.sleep(max(0.0, began + at - time.monotonic()))
                started[run].kill()
        for run, process in started.items():
            out, err = process.communicate(timeout=60)
            assert process.returncode in ENDINGS, f"{run}: {process.returncode} {err}"
            if process.returncode == 0:
                printed[run] = out
        provider.wait_idle()  # what a killed start sent is performed or dropped by now
    raise AssertionError(f"the race for order {order} did not end: {printed}")


def test_racing_runs_killed_at_random_act_once_per_subject(store_url: str, tmp_path: Path) -> None:
    """Two runs with different ids refund one order at the same moment, each SIGKILLed at
    random and restarted: the provider performed the refund once, one run alone sent it,
    and both runs end with its answer."""
    seed = int(os.environ.get("ONCELOG_KILL_SEED", random.randrange(1 << 32)))
    print(f"ONCELOG_KILL_SEED={seed}")
    rng = random.Random(seed)
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        for trial in range(TRIALS):
            order = str(trial)
            printed = race(store_url, provider, order, rng)
            runs = (f"a-{order}", f"b-{order}")
            [answer] = performed(provider, *runs)
            senders = [run for run in runs if provider.requests(run)]
            assert len(senders) == 1, senders
            assert [json.loads(text) for text in printed.values()] == [answer, answer]
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok
