"""Dovecot serving the demo's SMTP Maildir over IMAP, so that the mail probe
(``oncelog.probes.mail.MailFinder``) can search what the SMTP server accepted.

aiosmtpd's ``Mailbox`` handler files every message it accepts in one Maildir before it
answers 250: a server that keeps a copy of what it accepts, the case in which a search
that finds nothing proves the message was not sent. Dovecot runs with a configuration of
the demo's own (nothing system-wide is read or written) on a free port. It will not read
mail as root, and the mail user it reads as must be able to enter the Maildir's folders,
so the Maildir lives in a folder of its own while Dovecot serves it and is moved into the
scenario's ``mail/`` when the services stop.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DOVECOT = "/usr/sbin/dovecot"
USER = "support@shop.example"
PASSWORD = "demo-only"  # Dovecot listens on 127.0.0.1 only, for this demo's minutes

CONFIG = """\
base_dir = {root}/run
state_dir = {root}/state
instance_name = oncelog-demo-{port}
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
log_path = {log}
mail_location = maildir:{root}/mail
first_valid_uid = 1
default_internal_user = {user}
default_login_user = {user}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/home
}}
"""


def dovecot() -> str | None:
    """Dovecot's command, or None if it is not installed."""
    return shutil.which("dovecot") or (DOVECOT if os.access(DOVECOT, os.X_OK) else None)


def _mail_user() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody") if os.getuid() == 0 else pwd.getpwuid(os.getuid())


@dataclass(frozen=True)
class Home:
    """Dovecot's files and the Maildir it serves, in a folder of their own."""

    root: Path
    log: Path
    user: pwd.struct_passwd
    command: str

    @property
    def maildir(self) -> Path:
        return self.root / "mail"

    def argv(self, port: int) -> list[str]:
        """Dovecot's command line, listening on ``port``."""
        config = CONFIG.format(root=self.root, port=port, log=self.log, user=self.user.pw_name,
                               uid=self.user.pw_uid, gid=self.user.pw_gid)  # fmt: skip
        (self.root / "dovecot.conf").write_text(config)
        return [self.command, "-F", "-c", str(self.root / "dovecot.conf")]


@contextmanager
def dovecot_home(folder: Path, command: str) -> Iterator[Home]:
    """A folder for Dovecot and its Maildir, moved to ``folder/mail`` at the end."""
    user = _mail_user()
    with tempfile.TemporaryDirectory(prefix="oncelog-demo-imap-") as made:
        root = Path(made)
        root.chmod(0o755)
        for sub in ("mail/cur", "mail/new", "mail/tmp", "run", "state", "home"):
            (root / sub).mkdir(parents=True)
        for sub in ("mail", "mail/cur", "mail/new", "mail/tmp", "home"):
            os.chown(root / sub, user.pw_uid, user.pw_gid)
        (root / "users").write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")
        try:
            yield Home(root, folder / "logs" / "dovecot.log", user, command)
        finally:
            shutil.move(root / "mail", folder / "mail")
