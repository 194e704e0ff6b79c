"""A probe declared in the gateway's config, as an upstream tool that finds a call's
effect by its key: after a gateway is SIGKILLed at any commit boundary, the call sent
again is settled by the probe (done with its answer, or sent once if it never went out),
never sent twice and never left for a person when the upstream can tell. A probe that
cannot tell leaves the call for a person, as without one. Counted at the upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oncelog.testing import CRASH_POINTS

from .support.gateway import (
    Upstream,
    gateway_config,
    running_gateway,
    start_gateway,
    sync_call,
    text_of,
    upstream_fixture,
)

EMAIL = {"to": "a@example.com", "body": "hi"}
PROBES = {"send_email": {"tool": "find_effect", "key_argument": "key"}}

upstream = upstream_fixture()


def killed_then_again(
    tmp_path: Path, upstream: Upstream, point: str, probes: dict[str, Any]
) -> tuple[Any, Any]:
    """send_email (create, no window) through a gateway SIGKILLed at ``point``, then sent
    again, twice, to a new gateway: its two answers."""
    config = gateway_config(tmp_path, upstream, probes=probes)
    url = str(tmp_path / "l.db")
    doomed = start_gateway(config, url, crash_at=f"{point}@send_email/m-1")
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the stream breaks, as it may
            sync_call(doomed.url, "send_email", EMAIL, "ticket-1", "m-1")
        assert doomed.process.wait(timeout=30) == -9
    finally:
        doomed.kill()
    with running_gateway(config, url) as gw:
        again = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
        twice = sync_call(gw.url, "send_email", EMAIL, "ticket-1", "m-1")
    return again, twice


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_probe_settles_a_call_killed_at_each_commit_boundary(
    tmp_path: Path, upstream: Upstream, point: str
) -> None:
    again, twice = killed_then_again(tmp_path, upstream, point, PROBES)
    assert not again.is_error, text_of(again)
    assert text_of(twice) == text_of(again)
    assert upstream.performed("send_email") == 1
    sent = upstream.received("send_email")
    assert len(sent) == 1
    probed = upstream.received("find_effect")
    if point in ("after_intent_commit", "after_call", "before_outcome_commit"):
        # In doubt: asked once, by its key; the answer is the probe's when it went out.
        assert [e["arguments"] for e in probed] == [{"key": sent[0]["key"]}]
        if point != "after_intent_commit":
            assert '"found": true' in text_of(again)
    else:
        assert probed == []  # nothing in doubt: nobody asked


def test_a_probe_that_cannot_tell_leaves_the_call_for_a_person(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The probe tool answers an error (it is asked without the key it needs): oncelog
    cannot tell, so the call waits for a person, as without a probe, and is not sent."""
    wrong = {"send_email": {"tool": "find_effect", "key_argument": "id"}}
    again, _ = killed_then_again(tmp_path, upstream, "after_call", wrong)
    assert again.is_error
    assert "AmbiguousOutcome" in text_of(again)
    assert len(upstream.received("find_effect")) >= 1
    assert upstream.performed("send_email") == 1


@pytest.mark.parametrize(
    ("probes", "said"),
    [
        ({"send_email": {"tool": "no_such_tool"}}, "must be listed by an upstream"),
        ({"no_such_tool": {"tool": "find_effect"}}, "must be listed by an upstream"),
        ({"send_email": {"tool": ""}}, "the probe of 'send_email' is"),
        ({"send_email": {"tool": "find_effect", "timeout": 3}}, "the probe of 'send_email' is"),
    ],
)
def test_a_probe_the_gateway_cannot_use_stops_it_at_its_start(
    tmp_path: Path, upstream: Upstream, probes: dict[str, Any], said: str
) -> None:
    config = gateway_config(tmp_path, upstream, probes=probes)
    with pytest.raises(AssertionError, match="did not start") as failed:
        start_gateway(config, str(tmp_path / "l.db"))
    assert said in str(failed.value)
    assert upstream.received() == []
