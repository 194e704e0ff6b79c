"""Attacks on a run whose live owner runs in a PID namespace of its own (a container, a
pod with ``hostNetwork: true``: the same host name, other PIDs). The owner is inside its
tool, holding the run's lease with heartbeats; from the host's namespace its PID names
another process or none. Neither a person's decision without ``--force`` nor a second
agent may treat it as dead: the provider (a marker file the tool appends to) counts one
call.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import oncelog
from oncelog.process import _leases as leases

from .support.launch import python
from .test_race import AGENT, Pipe, Racer, agents, marker_lines

# --kill-child: the agent dies with the unshare process the test started and may kill.
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux), to run an agent in a PID namespace of its own"
    done = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"unshare --pid failed: {done.stderr.strip()}"


@contextmanager
def owner_in_namespace(db: str, *args: str) -> Iterator[tuple[Racer, Pipe]]:
    """An agent in a new PID namespace, inside its tool until the pipe's write end closes."""
    if reason := _can_unshare():
        pytest.skip(reason)
    in_tool, hold = Pipe(), Pipe()
    proc = subprocess.Popen(
        [*UNSHARE, *python(str(AGENT), db, *args, "--in-tool", str(in_tool.write),
                           "--hold", str(hold.read))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        pass_fds=(in_tool.write, hold.read),
    )  # fmt: skip
    owner = Racer(proc)
    try:
        in_tool.close_write()
        hold.close_read()
        assert in_tool.read_line(), f"the owner never reached its tool: {owner.end().stderr}"
        in_tool.close_read()
        yield owner, hold
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        hold.close_write()


@pytest.mark.parametrize("kind", ["payment", "upsert"])
def test_a_live_owner_in_another_pid_namespace_keeps_its_run(
    store_url: str, tmp_path: Path, kind: str
) -> None:
    marker = tmp_path / "marker"
    common = ("r", "--kind", kind, "--marker", str(marker))
    with owner_in_namespace(store_url, *common) as (owner, hold):
        with oncelog.open(store_url) as ledger:
            holder = ledger.get_run("r").owner
            try:
                ledger.resolve("r", "charge", "not_done", by="alice")
                refused = False
            except oncelog.RunLeased:
                refused = True
        with agents(tmp_path, store_url) as start:
            second = start(*common).end()
        hold.close_write()
        ended = owner.end()
    calls = marker_lines(marker)
    assert len(calls) == 1, f"the provider was called {len(calls)} times: {calls}"
    assert refused, f"a person's decision was taken without --force while {holder} lived"
    assert second.code == oncelog.EXIT_TRY_LATER, second.stderr
    assert "RunLeased" in second.stderr
    assert ended.code == 0, ended.stderr
    with oncelog.open(store_url) as ledger:
        charge = ledger.steps("r")[-1]
        assert ledger.verify().ok
    assert (charge.state, charge.attempts) == (oncelog.StepState.DONE, 1)


def test_only_an_owner_in_this_pid_namespace_is_judged_by_its_pid() -> None:
    gone = subprocess.Popen(python("-c", "pass"))
    gone.wait()
    mine = leases.new_owner()
    host, _, start, namespace, nonce = mine.split("|")
    assert namespace != "-", "this test's /proc shows its own PID namespace"
    dead = f"{host}|{gone.pid}|{start}|{namespace}|{nonce}"
    assert leases.is_dead(dead)
    assert not leases.is_dead(mine)
    # The same dead pid, named in another namespace, in the older form (no namespace), or
    # from another boot of the kernel, proves nothing.
    for other in (
        f"{host}|{gone.pid}|{start}|{namespace}0|{nonce}",
        f"{host}|{gone.pid}|{start}|{nonce}",
        f"{host}|{gone.pid}|{start}|-|{nonce}",
        f"{host}|{gone.pid}|{start}|0{namespace}|{nonce}",
    ):
        assert not leases.is_dead(other), other
    leases.forget(mine)
    assert leases.is_dead(mine)


def test_a_proc_of_another_pid_namespace_proves_no_namespace() -> None:
    """An agent that unshared its PID namespace without mounting its own /proc: the pids
    /proc shows are the host's, not its own, so it names no namespace in its owners."""
    if reason := _can_unshare():
        pytest.skip(reason)
    code = "from oncelog.process import _leases as l; print(l.new_owner().split('|')[3])"
    done = subprocess.run(
        ["unshare", "--pid", "--fork", *python("-c", code)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "-"
