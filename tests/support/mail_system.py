"""A mail system of the test's own: Dovecot serving a Maildir over IMAP, and the tests'
SMTP server (``mail_server.py``) delivering every message it accepts into that Maildir.
Both run with their files in a temporary folder and listen on free ports of 127.0.0.1;
no system configuration is read or written. Messages are counted by reading the Maildir.
"""

from __future__ import annotations

import mailbox
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

from oncelog.showcases.demo.imap import CONFIG  # Dovecot on a folder of its own

from .launch import python

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
DOVECOT_REASON = "Dovecot (Debian's dovecot-imapd) for the mail tests"
SERVER_SCRIPT = Path(__file__).with_name("mail_server.py")
USER = "archive@shop.example"
PASSWORD = "archive-secret"
KEY_HEADER = "X-Oncelog-Key"


def dovecot_is_installed() -> bool:
    return os.access(DOVECOT, os.X_OK)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    for _ in range(200):
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not listen on {port}")


@dataclass
class MailSystem:
    root: Path
    smtp_port: int
    imap_port: int
    kill_file: Path
    dovecot: subprocess.Popen[bytes] | None = None

    @property
    def maildir(self) -> Path:
        return self.root / "mail"

    def messages(self) -> list[Message]:
        """Every message the SMTP server accepted, read from the Maildir itself."""
        return list(mailbox.Maildir(self.maildir, create=False))

    def with_key(self, key: str) -> list[Message]:
        return [message for message in self.messages() if message[KEY_HEADER] == key]

    def start_imap(self) -> None:
        self.dovecot = subprocess.Popen([DOVECOT, "-F", "-c", str(self.root / "dovecot.conf")])
        wait_for_port(self.imap_port, self.dovecot, "dovecot")

    def stop_imap(self) -> None:
        """Dovecot down: the port refuses connections (its IMAP processes end with it)."""
        if self.dovecot is not None:
            self.dovecot.send_signal(signal.SIGTERM)
            self.dovecot.wait(timeout=30)
            self.dovecot = None


def _mail_user() -> pwd.struct_passwd:
    """Dovecot refuses to open mail as root: as root, the mail belongs to nobody."""
    return pwd.getpwnam("nobody") if os.getuid() == 0 else pwd.getpwuid(os.getuid())


@contextmanager
def running_mail_system(
    refuse: str | None = None, stall: str | None = None
) -> Iterator[MailSystem]:
    """Dovecot and the SMTP server, both stopped (and their ports freed) at the end. Their
    folder is a temporary one of their own, not pytest's: Dovecot reads it as the mail
    user, who cannot enter a folder only root may."""
    with tempfile.TemporaryDirectory(prefix="oncelog-mail-") as folder:
        os.chmod(folder, 0o755)
        with _running(Path(folder), refuse, stall) as system:
            yield system


@contextmanager
def _running(root: Path, refuse: str | None, stall: str | None) -> Iterator[MailSystem]:
    user = _mail_user()
    for folder in ("mail/cur", "mail/new", "mail/tmp", "run", "state", "home"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for folder in ("mail", "mail/cur", "mail/new", "mail/tmp", "home"):
        os.chown(root / folder, user.pw_uid, user.pw_gid)
    system = MailSystem(root, free_port(), free_port(), root / "kill-pid")
    (root / "users").write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")
    (root / "dovecot.conf").write_text(CONFIG.format(
        root=root, port=system.imap_port, log=root / "dovecot.log", user=user.pw_name,
        uid=user.pw_uid, gid=user.pw_gid,
    ))  # fmt: skip
    argv = python(SERVER_SCRIPT, "--maildir", root / "mail", "--port", str(system.smtp_port),
                  "--kill-file", system.kill_file)  # fmt: skip
    argv += ["--refuse", refuse] if refuse else []
    argv += ["--stall", stall] if stall else []
    smtp = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(system.smtp_port, smtp, "the SMTP server")
        system.start_imap()
        yield system
    finally:
        system.stop_imap()
        smtp.send_signal(signal.SIGTERM)
        smtp.wait(timeout=30)
