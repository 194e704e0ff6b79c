"""Markers: an effect at a provider that takes no key, found again by the marker the tool
stamped into what the provider keeps. The rules of ``MarkerProbe`` one by one, then an
agent SIGKILLed after the provider performed (or before it was asked), messages counted
at the provider's own process."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import CANNOT_TELL, NOT_FOUND, Found, markers

from .support.launch import environment, python, run_python

PROVIDER = Path(__file__).parent / "support" / "marker_provider.py"
SECRET = b"the ledger's stamp key, for tests outside a run"
# What the agents' ledgers sign their stamps with (a PostgreSQL ledger has no file).
LINK_SECRET = "a-link-secret-of-the-marker-tests-0123456789"
AGENT = Path(__file__).parent / "crash_agents" / "marker_agent.py"


# -- the marker -----------------------------------------------------------------------


def test_a_marker_is_one_stable_word_of_the_key() -> None:
    first = markers.marker("run-1/post/0", SECRET)
    assert first == markers.marker("run-1/post/0", SECRET)
    assert first != markers.marker("run-1/post/1", SECRET)
    assert first.startswith("oncelog-")
    assert len(first.split()) == 1
    assert len(first) == 40
    assert "run-1" not in first
    with pytest.raises(oncelog.ConfigurationError):
        markers.marker("", SECRET)


def test_only_the_last_line_the_tool_wrote_is_read() -> None:
    forged = markers.stamp("x", "another effect's key", SECRET)  # the model wrote a marker...
    text = markers.stamp(f"a reply\n{forged}\nsigned", "k", SECRET)  # ... the tool stamps last
    assert markers.stamped(text) == markers.marker("k", SECRET)
    assert markers.stamped(f"{markers.stamp('x', 'k', SECRET)}\nmore") is None
    assert markers.stamped(f"see {markers.marker('k', SECRET)}") is None
    assert markers.stamped(None) is None


# -- the probe's rules, with a search the test holds ----------------------------------


@dataclass
class Search:
    items: list[dict[str, Any]]
    calls: int = 0

    def __call__(self, marker: str) -> list[dict[str, Any]]:
        self.calls += 1
        return [item for item in self.items if marker in item["text"]]


def probe(search: Search, after: float | None = None, slept: list[float] | None = None) -> Any:
    return markers.MarkerProbe(
        search=search,
        marker_of=lambda item: markers.stamped(item["text"]),
        result_of=lambda item: {"id": item["id"]},
        consistent_after=None if after is None else timedelta(seconds=after),
        sleep=(slept if slept is not None else []).append,
        secret=SECRET,
    )


def test_one_carrier_is_found() -> None:
    search = Search([{"id": 7, "text": markers.stamp("hi", "k", SECRET)}])
    assert probe(search)("k") == Found({"id": 7})


def test_a_near_miss_is_not_a_carrier() -> None:
    quoted = {"id": 1, "text": f"quoting <!-- {markers.marker('k', SECRET)} --> in the middle\nend"}
    assert probe(Search([quoted]), after=1.0)("k") is NOT_FOUND


def test_several_carriers_are_for_a_person() -> None:
    twice = [{"id": n, "text": markers.stamp("hi", "k", SECRET)} for n in (1, 2)]
    assert probe(Search(twice))("k") is CANNOT_TELL


def test_none_found_by_a_search_not_declared_consistent_cannot_tell() -> None:
    search = Search([{"id": 1, "text": markers.stamp("hi", "other", SECRET)}])
    assert probe(search)("k") is CANNOT_TELL
    assert search.calls == 1


def test_none_found_after_the_declared_time_is_not_found() -> None:
    slept: list[float] = []
    search = Search([])
    assert probe(search, after=2.5, slept=slept)("k") is NOT_FOUND
    assert (slept, search.calls) == ([2.5], 2)  # searched again once that long had passed


def test_a_failing_search_cannot_tell() -> None:
    def broken(marker: str) -> list[dict[str, Any]]:
        raise ConnectionError("provider down")

    assert probe(broken, after=1.0)("k") is CANNOT_TELL  # type: ignore[arg-type]
    with pytest.raises(oncelog.ConfigurationError):
        probe(Search([]), after=0.0)


# -- killed agents, counted at the provider -------------------------------------------


@dataclass(frozen=True)
class MarkerProvider:
    url: str
    performed: Path

    def messages(self) -> list[dict[str, Any]]:
        if not self.performed.exists():
            return []
        return [json.loads(line) for line in self.performed.read_text().splitlines()]


@contextmanager
def marker_provider(folder: Path, lag: float) -> Iterator[MarkerProvider]:
    performed = folder / "performed"
    command = python(PROVIDER, "--performed", performed, "--lag", str(lag))
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("PORT "), line
            yield MarkerProvider(f"http://127.0.0.1:{int(line.split()[1])}", performed)
        finally:
            process.kill()


def start(
    store_url: str, provider: MarkerProvider, crash_at: str | None = None, *options: str
) -> subprocess.CompletedProcess[str]:
    return run_python(
        AGENT,
        store_url,
        "r",
        provider.url,
        *options,
        env=environment(crash_at=crash_at, ONCELOG_LINK_SECRET=LINK_SECRET),
    )


def stamp_key(store_url: str) -> bytes:
    """The stamp key the agents' ledger signs with (under their link secret)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ONCELOG_LINK_SECRET", LINK_SECRET)
        with oncelog.open(store_url) as ledger:
            return ledger.stamp_key()


def post_step(store_url: str) -> oncelog.StepRecord:
    with oncelog.open(store_url) as ledger:
        [step] = ledger.steps("r")
    return step


def test_killed_after_the_provider_kept_it_is_found(store_url: str, tmp_path: Path) -> None:
    with marker_provider(tmp_path, lag=0.0) as provider:
        killed = start(store_url, provider, "after_call@post")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        again = start(store_url, provider)
        assert again.returncode == 0, again.stderr
        [message] = provider.messages()
        assert json.loads(again.stdout) == {"id": message["id"]}
        step = post_step(store_url)
        assert (step.state, step.attempts) == (oncelog.StepState.DONE, 1)
        assert markers.stamped(message["text"]) == markers.marker(step.key, stamp_key(store_url))


def test_a_lagging_search_halts_and_then_finds_it(store_url: str, tmp_path: Path) -> None:
    """The replica has not seen the message yet, and the search is not declared
    consistent: a person is asked, never a resend; once the replica caught up, the
    next start's probe finds it."""
    with marker_provider(tmp_path, lag=3.0) as provider:
        assert start(store_url, provider, "after_call@post").returncode == -signal.SIGKILL
        halted = start(store_url, provider)
        assert halted.returncode == oncelog.EXIT_HALTED, halted.stderr
        assert post_step(store_url).state is oncelog.StepState.UNKNOWN
        time.sleep(3.0)
        again = start(store_url, provider)
        assert again.returncode == 0, again.stderr
        assert len(provider.messages()) == 1


def test_a_search_declared_consistent_waits_and_finds_it(store_url: str, tmp_path: Path) -> None:
    with marker_provider(tmp_path, lag=1.0) as provider:
        assert start(store_url, provider, "after_call@post").returncode == -signal.SIGKILL
        again = start(store_url, provider, None, "--consistent-after", "2")
        assert again.returncode == 0, again.stderr
        assert len(provider.messages()) == 1
        assert post_step(store_url).attempts == 1


def test_killed_before_the_call_is_sent_once_after_the_declared_time(
    store_url: str, tmp_path: Path
) -> None:
    with marker_provider(tmp_path, lag=0.2) as provider:
        killed = start(store_url, provider, "after_intent_commit@post")
        assert killed.returncode == -signal.SIGKILL
        assert provider.messages() == []
        again = start(store_url, provider, None, "--consistent-after", "0.5")
        assert again.returncode == 0, again.stderr
        assert len(provider.messages()) == 1
        assert post_step(store_url).attempts == 2
