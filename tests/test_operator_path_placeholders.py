"""The commands oncelog prints hold placeholders (``--by NAME``, ``--why WHY``): pasted
unedited, each would be recorded as a person's name or a reason, so the CLI refuses it and
says what to type. ``$ONCELOG_BY``, set once, stands for ``--by``, and the commands the CLI
then prints leave ``--by NAME`` out, to paste as they are. ``done`` is printed with
``--no-result``: pasted, the agent gets ``NO_RESULT``, never a placeholder answer. Each
command runs in bash, as the operator pastes it, against a real ledger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import oncelog


def pasted(
    command: str, store_url: str, cwd: Path, by: str | None = None
) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_BY"}
    env.update(PATH=path, ONCELOG_URL=store_url, **({} if by is None else {"ONCELOG_BY": by}))
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def sender(ledger: oncelog.Ledger, sent: list[str]) -> oncelog.Tool[..., dict[str, str]]:
    """A mail tool whose first send gets no answer."""

    @ledger.tool(kind="create", name="send")
    def send(*, idempotency_key: str) -> dict[str, str]:
        sent.append(idempotency_key)
        if len(sent) == 1:
            raise ConnectionError("Connection refused")
        return {"id": "m1"}

    return send


def in_doubt(ledger: oncelog.Ledger, sent: list[str] | None = None) -> str:
    """Run r1's mail in doubt: the message that stopped it."""
    send = sender(ledger, [] if sent is None else sent)
    with pytest.raises(oncelog.AmbiguousOutcome) as stopped, ledger.run("r1") as run:
        run.effect("mail", send)
    return str(stopped.value)


def printed_done(message: str) -> str:
    start = message.index("oncelog resolve r1 mail done ")
    return message[start:].split(" (", 1)[0]


def test_the_printed_done_gives_the_agent_no_result_not_a_placeholder_answer(
    store_url: str, tmp_path: Path
) -> None:
    sent: list[str] = []
    with oncelog.open(store_url) as ledger:
        done = printed_done(in_doubt(ledger, sent))
    decided = pasted(done.replace("--by NAME", "--by alice"), store_url, tmp_path)
    assert decided.returncode == 0, decided.stdout + decided.stderr
    with oncelog.open(store_url, create=False) as ledger, ledger.run("r1") as run:
        got: object = run.effect("mail", sender(ledger, sent))
    assert (got, len(sent)) == (oncelog.NO_RESULT, 1)


@pytest.mark.parametrize(
    ("command", "placeholder"),
    [
        ("oncelog resolve r1 mail not_done --by NAME --attempt 1", "'NAME'"),
        ("oncelog resolve r1 mail done --text 'WHAT IT RETURNED' --by alice", "'WHAT IT RETURNED'"),
        ("oncelog retry r1 mail --by alice --why WHY", "'WHY'"),
        ("oncelog resume --run r1 --by NAME", "'NAME'"),
    ],
)
def test_a_placeholder_pasted_unedited_is_refused_and_decides_nothing(
    store_url: str, tmp_path: Path, command: str, placeholder: str
) -> None:
    with oncelog.open(store_url) as ledger:
        in_doubt(ledger)
        ledger.halt("look first", by="ops", run="r1")
    refused = pasted(command, store_url, tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"{placeholder} is the placeholder of the printed command" in refused.stderr
    with oncelog.open(store_url, create=False) as ledger:
        assert [d.step.step_id for d in ledger.effects_in_doubt()] == ["mail"]
        assert [h.cleared_by for h in ledger.halts()] == [None]


def test_oncelog_by_stands_for_by_and_the_printed_commands_leave_it_out(
    store_url: str, tmp_path: Path
) -> None:
    with oncelog.open(store_url) as ledger:
        in_doubt(ledger)
        ledger.halt("look first", by="ops", run="r1")
    refused = pasted("oncelog resolve r1 mail not_done --attempt 1", store_url, tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr  # no name: no decision
    decided = pasted("oncelog resolve r1 mail not_done --attempt 1", store_url, tmp_path, "alice")
    assert decided.returncode == 0, decided.stdout + decided.stderr
    [resume] = [line.strip() for line in decided.stdout.splitlines() if "oncelog resume" in line]
    assert resume == "oncelog resume --run r1", decided.stdout
    cleared = pasted(resume, store_url, tmp_path, "alice")
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    with oncelog.open(store_url, create=False) as ledger:
        assert [h.cleared_by for h in ledger.halts(active_only=False)] == ["alice"]
        resolved = [e for e in ledger.journal("r1") if e.event == "resolved"]
        assert [e.data.get("by") for e in resolved] == ["alice"], resolved
