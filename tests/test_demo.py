"""``oncelog demo`` end to end: the real command, real services, real kills.

What is checked comes from the records the services leave in the demo's folder (the help
desk's SQLite file, the SMTP server's Maildir, localstripe's charges as its API listed
them) and from the ledger, read here with the standard library and oncelog's API: not
from the demo's printed table.
"""

from __future__ import annotations

import json
import mailbox
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli
from oncelog.probes.mail import message_id_for
from oncelog.showcases.demo import oncelog_here
from tests.conftest import require

from .support.launch import python
from .support.mail_system import DOVECOT_REASON, dovecot_is_installed

HAVE_DEMO = all(find_spec(name) is not None for name in ("stripe", "localstripe", "aiosmtpd"))
LOCALSTRIPE_STATE = Path("/tmp/localstripe.pickle")  # written by localstripe; see services.py
CUSTOMER = "ada@example.com"
RUN = "conv-4711"


def ticket_rows(folder: Path) -> list[sqlite3.Row]:
    with closing(sqlite3.connect(f"file:{folder / 'tickets.db'}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM tickets").fetchall()


def emails(folder: Path) -> list[Any]:
    return list(mailbox.Maildir(folder / "mail", create=False))


def charges(folder: Path) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads((folder / "stripe-charges.json").read_text())
    return listed


def running(pid: int, argv: list[str]) -> bool:
    """Whether that process still runs: the pid exists, is no zombie, and has the
    command line it was started with (so a reused pid does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and cmdline == [a.encode() for a in argv]


def run_demo(out: Path, *flags: str) -> str:
    """One run of the command, as a user starts it; its output."""
    state_before = LOCALSTRIPE_STATE.read_bytes() if LOCALSTRIPE_STATE.exists() else None
    done = subprocess.run(
        python("-m", "oncelog", "demo", "--out", str(out), *flags),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    state_after = LOCALSTRIPE_STATE.read_bytes() if LOCALSTRIPE_STATE.exists() else None
    assert state_after == state_before  # localstripe's state file is as it was
    return done.stdout


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo with the email in doubt left to a person; its folder and its output."""
    require(HAVE_DEMO, "needs the demo's extra: pip install '.[demo]'")
    out = tmp_path_factory.mktemp("demo") / "out"
    return out, run_demo(out, "--no-mail-probe")


@pytest.fixture(scope="module")
def demo_with_mail_probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo as the README starts it, where Dovecot is installed: the mail probe on."""
    require(HAVE_DEMO, "needs the demo's extra: pip install '.[demo]'")
    require(dovecot_is_installed(), DOVECOT_REASON)
    out = tmp_path_factory.mktemp("demo-mail-probe") / "out"
    return out, run_demo(out)


def test_without_a_ledger_everything_happens_twice(demo: tuple[Path, str]) -> None:
    plain = demo[0] / "plain"
    assert [row["requester"] for row in ticket_rows(plain)] == [CUSTOMER] * 2
    assert [message["To"] for message in emails(plain)] == [CUSTOMER] * 2
    assert len({message["Message-ID"] for message in emails(plain)}) == 2
    assert len(charges(plain)) == 2
    assert {charge["paid"] for charge in charges(plain)} == {True}
    assert not (plain / "ledger.db").exists()


def test_with_oncelog_everything_happens_once(demo: tuple[Path, str]) -> None:
    guarded = demo[0] / "oncelog"
    with oncelog.open(str(guarded / "ledger.db")) as ledger:
        assert ledger.get_run(RUN).status is oncelog.RunStatus.COMPLETED
        steps = {step.step_id: step for step in ledger.steps(RUN)}
        secret = ledger.stamp_key()
    assert len(steps) == 20
    [ticket] = ticket_rows(guarded)
    assert ticket["id"] == steps["open_ticket"].result["id"]
    assert (ticket["status"], ticket["payment"]) == ("solved", steps["charge"].result["id"])
    [email] = emails(guarded)
    assert email["Message-ID"] == message_id_for(steps["send_email"].key, "shop.example", secret)
    [charge] = charges(guarded)
    assert charge["payment_intent"] == steps["charge"].result["id"]


def test_the_probe_settled_the_charge_and_a_person_the_email(demo: tuple[Path, str]) -> None:
    with oncelog.open(str(demo[0] / "oncelog" / "ledger.db")) as ledger:
        steps: dict[int | None, str] = {step.seq: step.step_id for step in ledger.steps(RUN)}
        journal = ledger.journal(RUN, limit=10_000)
    processes = [entry for entry in journal if entry.event == "lease_acquired"]
    assert len(processes) == 4  # killed after the charge, killed after the email, halted
    [probed] = [entry for entry in journal if entry.event == "probed"]
    assert (steps[probed.seq], probed.data["state"]) == ("charge", "done")
    assert str(probed.data["result"]["id"]).startswith("pi_")
    [unknown] = [entry for entry in journal if entry.event == "unknown"]
    [resolved] = [entry for entry in journal if entry.event == "resolved"]
    assert steps[unknown.seq] == steps[resolved.seq] == "send_email"
    assert resolved.data["resolution"] == "done"
    attempts = [
        e for e in journal if e.event == "intent" and steps[e.seq] in ("charge", "send_email")
    ]
    assert len(attempts) == 2  # neither was called a second time


def test_the_mail_probe_settled_the_email(demo_with_mail_probe: tuple[Path, str]) -> None:
    out, printed = demo_with_mail_probe
    assert "mail probe on:" in printed
    assert "no person was needed" in printed
    guarded = out / "oncelog"
    with oncelog.open(str(guarded / "ledger.db")) as ledger:
        assert ledger.get_run(RUN).status is oncelog.RunStatus.COMPLETED
        steps = {step.step_id: step for step in ledger.steps(RUN)}
        journal = ledger.journal(RUN, limit=10_000)
    by_seq: dict[int | None, str] = {step.seq: step_id for step_id, step in steps.items()}
    assert len([entry for entry in journal if entry.event == "lease_acquired"]) == 3
    probed = {
        by_seq[entry.seq]: entry.data["state"] for entry in journal if entry.event == "probed"
    }
    assert probed == {"charge": "done", "send_email": "done"}
    assert not [entry for entry in journal if entry.event in ("unknown", "resolved")]
    [email] = emails(guarded)  # counted in the SMTP server's Maildir
    assert email["Message-ID"] == steps["send_email"].result["message_id"]
    assert len(emails(out / "plain")) == 2
    started = json.loads((out / "processes.json").read_text())
    assert [process["role"] for process in started].count("imap") == 1
    assert not [p for p in started if running(p["pid"], [str(a) for a in p["argv"]])]


def test_every_process_it_started_has_ended(demo: tuple[Path, str]) -> None:
    started = json.loads((demo[0] / "processes.json").read_text())
    roles = [process["role"] for process in started]
    assert roles.count("localstripe") == roles.count("smtp") == roles.count("tickets") == 2
    assert sum(role.startswith("agent") for role in roles) == 6  # 2 plain, 4 with oncelog
    assert [p["pid"] for p in started if running(p["pid"], p["argv"])] == []


def test_it_shows_the_table_and_the_timeline(demo: tuple[Path, str]) -> None:
    out = demo[1]
    assert "killed    process 1 (SIGKILL) at step 12/20 send_email" in out
    for name in ("tickets", "emails", "charges"):
        [row] = [line for line in out.splitlines() if line.startswith(f"  {name} ")]
        assert row.split()[-2:] == ["2", "1"]
    assert "its probe found pi_" in out
    assert f"oncelog show {RUN} --db {demo[0] / 'oncelog' / 'ledger.db'}" in out


def test_without_the_extra_it_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiosmtpd", None)  # what an absent package looks like
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 1
    assert "pip install " in result.output
    assert "[demo]' (oncelog's checkout)" in result.output


def test_a_folder_with_something_in_it_is_refused(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    result = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "not empty" in result.output
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@contextmanager
def ticket_service(db: Path, *flags: str) -> Iterator[str]:
    argv = python("-m", "oncelog.showcases.demo.tickets", str(db), *flags)
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            yield f"http://127.0.0.1:{process.stdout.readline().strip()}"
        finally:
            process.terminate()


@pytest.mark.parametrize(("flags", "made"), [((), 2), (("--honour-idempotency-key",), 1)])
def test_the_ticket_service_deduplicates_only_when_told(
    tmp_path: Path, flags: tuple[str, ...], made: int
) -> None:
    require(HAVE_DEMO, "needs the demo's extra: pip install '.[demo]'")
    from oncelog.showcases.demo.clients import HelpDesk

    with ticket_service(tmp_path / "tickets.db", *flags) as url:
        desk = HelpDesk(url)
        first = desk.open_ticket(CUSTOMER, "refund", "twice?", idempotency_key="k1")
        again = desk.open_ticket(CUSTOMER, "refund", "twice?", idempotency_key="k1")
        desk.open_ticket(CUSTOMER, "other", "another key", idempotency_key="k2")
    assert (again["id"] == first["id"]) is (made == 1)
    assert len(ticket_rows(tmp_path)) == made + 1


def test_the_demo_says_it_plays_the_operator_and_what_one_would_type(
    demo: tuple[Path, str],
) -> None:
    out = demo[1]
    assert "(the demo plays the operator here)" in out
    typed = out.split("== what a real operator would have typed", 1)[1].splitlines()[2:]
    ledger = demo[0] / "oncelog" / "ledger.db"
    here = oncelog_here()  # "oncelog" only where this shell finds it on its PATH
    assert typed[0] == f"  {here} unknown --db {ledger}"
    assert typed[1] == f"  {here} show {RUN} --db {ledger}"
    assert typed[2].startswith(f"  {here} resolve {RUN} send_email done --by demo-operator ")
    for command in (typed[1], out.rstrip().splitlines()[-1]):  # the last: "oncelog show"
        shown = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False
        )  # in the shell that started the demo, as a person pastes it
        assert shown.returncode == 0, (command, shown.stderr)
    assert typed[2].endswith(f" --db {ledger}")
    resolve = shlex.split(typed[2])[1:]  # the command as printed works as it is
    again = CliRunner().invoke(cli, resolve)
    assert again.exit_code == 6  # already resolved, by the demo: a conflict, not a usage error
    assert "demo-operator resolved it done at" in again.output


def test_without_dovecot_it_says_the_mail_probe_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    require(HAVE_DEMO, "needs the demo's extra: pip install '.[demo]'")
    from oncelog.showcases.demo import runner

    monkeypatch.setattr(runner, "dovecot", lambda: None)
    said: list[str] = []
    assert runner.mail_probe_command(True, said.append) is None
    assert "mail probe off: Dovecot is not installed" in said[0]
    assert "waits for" in " ".join(said)
