"""The demo's services, each its own process on this machine, started and always stopped.

- payments: ``localstripe``, a stateful Stripe-compatible server. It is GPL-3.0, so
  oncelog only ever runs its command, never imports it. That command listens on a port
  given in advance (so one is picked, and picked again if it was taken meanwhile), on
  IPv6 (with IPv4 mapped in, where the system allows it), and saves its whole state to
  ``/tmp/localstripe.pickle`` after every write, a path it does not let us change:
  ``--from-scratch`` keeps it from loading that file, and the demo puts back what was
  there before it started.
- email: ``aiosmtpd``'s own command with its ``Mailbox`` handler, which stores every
  message it accepts as one file of a Maildir before it answers 250.
- tickets: ``oncelog.showcases.demo.tickets``, with its SQLite file.
- IMAP, for the mail probe: Dovecot serving the SMTP server's Maildir (``imap.py``), where
  it is installed and the probe is on.

    python -m oncelog.showcases.demo.services DIR

starts all three for a person who wants to run the support agent by hand, writes their
addresses to ``DIR/services.json`` and keeps them up until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import stripe

from . import DemoFailed
from .clients import STRIPE_API_KEY, Services
from .imap import dovecot_home

if TYPE_CHECKING:
    from stripe.params import ChargeListParams

STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
LOCALSTRIPE_STATE = Path("/tmp/localstripe.pickle")
CARD = "pm_card_visa"  # Stripe's test card, which localstripe knows too


@dataclass
class Processes:
    """Every process the demo starts, by role and pid, kept in ``processes.json`` so
    that anyone can check afterwards that none is left running."""

    path: Path
    started: list[dict[str, Any]] = field(default_factory=list)

    def add(self, role: str, process: subprocess.Popen[Any]) -> None:
        self.started.append({"role": role, "pid": process.pid, "argv": process.args})
        self.path.write_text(json.dumps(self.started, indent=2, default=str) + "\n")


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


@contextmanager
def unwound_by_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM unwinds like Ctrl-C does (Python's default would end the
    process on the spot), so the blocks that stop the services run."""
    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop(process: subprocess.Popen[Any]) -> None:
    """End a process and reap it: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running(
    argv: list[str], role: str, log: Path, processes: Processes, *, read_stdout: bool = False
) -> Iterator[subprocess.Popen[str]]:
    """A process with its output in ``log`` (but stdout, if the caller reads it), stopped
    when the block ends, however it ends. It runs in a session of its own: a Ctrl-C at
    the terminal reaches the demo alone, which then stops it."""
    with log.open("w") as out:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE if read_stdout else out,
            stderr=out,
            text=True,
            start_new_session=True,
        )
    processes.add(role, process)
    try:
        yield process
    finally:
        stop(process)
        if process.stdout is not None:
            process.stdout.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen[str], role: str) -> bool:
    """Whether ``ready`` came true before ``process`` exited; a service that neither
    answers nor exits within the timeout fails the demo."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if ready():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.05)
    raise DemoFailed(f"{role} did not start in {STARTUP_TIMEOUT:.0f} s")


def _listening(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with socket.create_connection(("localhost", port), timeout=1):
                return True
        except OSError:
            return False

    return check


def _failed(role: str, log: Path) -> DemoFailed:
    return DemoFailed(f"{role} did not start; its log ends:\n{log.read_text()[-2000:]}")


@contextmanager
def _on_free_port(
    role: str, argv_for: Callable[[int], list[str]], log: Path, processes: Processes
) -> Iterator[int]:
    """Run a server that must be told its port; try another if that one was taken
    between picking it and the server binding it."""
    for _ in range(3):
        port = _free_port()
        with running(argv_for(port), role, log, processes) as process:
            if _wait_until(_listening(port), process, role):
                yield port
                return
    raise _failed(role, log)


@contextmanager
def _localstripe_state_kept() -> Iterator[None]:
    before = LOCALSTRIPE_STATE.read_bytes() if LOCALSTRIPE_STATE.exists() else None
    try:
        yield
    finally:
        if before is None:
            LOCALSTRIPE_STATE.unlink(missing_ok=True)
        else:
            LOCALSTRIPE_STATE.write_bytes(before)


@contextmanager
def localstripe(folder: Path, processes: Processes) -> Iterator[str]:
    with (
        _localstripe_state_kept(),
        _on_free_port(
            "localstripe",
            lambda port: [
                sys.executable,
                "-m",
                "localstripe",
                "--port",
                str(port),
                "--from-scratch",
            ],
            folder / "logs" / "localstripe.log",
            processes,
        ) as port,
    ):
        yield f"http://localhost:{port}"


@contextmanager
def smtp_server(folder: Path, processes: Processes, mail: Path) -> Iterator[tuple[str, int]]:
    argv = [sys.executable, "-m", "aiosmtpd", "--nosetuid", "-c", "aiosmtpd.handlers.Mailbox"]
    with _on_free_port(
        "smtp",
        lambda port: [*argv, "--listen", f"127.0.0.1:{port}", str(mail)],
        folder / "logs" / "smtp.log",
        processes,
    ) as port:
        yield "127.0.0.1", port


@contextmanager
def ticket_service(folder: Path, processes: Processes) -> Iterator[str]:
    log = folder / "logs" / "tickets.log"
    argv = [sys.executable, "-m", "oncelog.showcases.demo.tickets", str(folder / "tickets.db")]
    with running(argv, "tickets", log, processes, read_stdout=True) as process:
        assert process.stdout is not None
        port = process.stdout.readline().strip()  # printed once the socket listens
        if not port.isdigit():
            raise _failed("tickets", log)
        yield f"http://127.0.0.1:{port}"


@contextmanager
def imap_server(folder: Path, processes: Processes, command: str) -> Iterator[tuple[Path, int]]:
    """Dovecot serving the Maildir the SMTP server will file into: that Maildir and the
    IMAP port. When the block ends the Maildir is ``folder/mail``, as without it."""
    with (
        dovecot_home(folder, command) as home,
        _on_free_port("imap", home.argv, folder / "logs" / "imap.log", processes) as port,
    ):
        yield home.maildir, port


@contextmanager
def services(folder: Path, processes: Processes, imap: str | None = None) -> Iterator[Services]:
    """All three, up, with their addresses in ``folder/services.json``; with ``imap``
    (Dovecot's command) the SMTP server's Maildir is served over IMAP too."""
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        stripe_url = stack.enter_context(localstripe(folder, processes))
        mail, imap_port = folder / "mail", None
        if imap is not None:
            mail, imap_port = stack.enter_context(imap_server(folder, processes, imap))
        smtp_host, smtp_port = stack.enter_context(smtp_server(folder, processes, mail))
        tickets_url = stack.enter_context(ticket_service(folder, processes))
        found = Services(stripe_url, smtp_host, smtp_port, tickets_url, imap_port)
        found.save(folder / "services.json")
        yield found


def stripe_client(services: Services) -> stripe.StripeClient:
    return stripe.StripeClient(
        STRIPE_API_KEY, base_addresses={"api": services.stripe}, max_network_retries=0
    )


def add_customer(services: Services, email: str, name: str) -> str:
    """The customer the agent will look up, with the card they updated."""
    client = stripe_client(services)
    customer = client.v1.customers.create(params={"email": email, "name": name})
    client.v1.payment_methods.attach(CARD, params={"customer": customer.id})
    return customer.id


def charges(services: Services) -> list[dict[str, Any]]:
    """Every charge localstripe holds, as its list API returns them, page by page."""
    client = stripe_client(services)
    found: list[dict[str, Any]] = []
    params: ChargeListParams = {"limit": 100}
    while True:
        page = client.v1.charges.list(params=params)
        found += [charge.to_dict() for charge in page.data]
        if not page.has_more:
            return found
        params["starting_after"] = page.data[-1].id


def main() -> None:
    folder = Path(sys.argv[1]).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with unwound_by_sigterm(), services(folder, Processes(folder / "processes.json")) as found:
        add_customer(found, "ada@example.com", "Ada Lovelace")
        print(f"services up; their addresses are in {folder / 'services.json'}. Try:")
        print(
            f"  python -m oncelog.showcases.demo.support_agent oncelog "
            f"--services {folder / 'services.json'} --ledger {folder / 'ledger.db'}"
        )
        print("Ctrl-C stops them.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
