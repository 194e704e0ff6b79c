"""A secret kept in a file only its owner can read: the link secret beside a SQLite ledger
and the console's login token. Made with 256 random bits, 0600 from the start; a file
that someone else could have put there or may read is refused rather than trusted (whoever
wrote the secret can forge what it signs): one that is a symbolic link, not a plain file,
owned by another user than the one reading it (root included: root could read it, but
whoever owns it chose its bytes), or that others may read; and so is one too short to be
a secret. What is checked is the file opened, not its name (``O_NOFOLLOW``, then
``fstat`` of the open file), so it cannot be swapped between the check and the read."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from ._exceptions import ConfigurationError

MIN_SECRET_CHARS = 32


def private_secret(path: Path, what: str, *, new: bool = False) -> str:
    """The ``what`` (a link secret, a console token) kept at ``path``: made when missing,
    or, with ``new``, replaced. Raises ``ConfigurationError``, naming the file and the way
    out, when it is a symbolic link or not a plain file, belongs to another user than the
    effective one, is readable by others, or holds fewer than ``MIN_SECRET_CHARS``
    characters."""
    path = path.expanduser()
    if new or not os.path.lexists(path):  # a dangling link is there: refused below
        _write(path, replace=new)
    way_out = f"delete it ('rm {path}') to get a new one"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ConfigurationError(
            f"{path} is a symbolic link: the {what} is read only from a file of its own, "
            f"never through a link that whoever made it may point anywhere; {way_out}"
        ) from None
    try:
        _check_kept(os.fstat(fd), path, what, way_out)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, encoding="utf-8") as kept:
        secret = kept.read().strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigurationError(f"{path} holds no usable {what}: {way_out}")
    return secret


def _check_kept(found: os.stat_result, path: Path, what: str, way_out: str) -> None:
    """Refuse the open file ``found`` unless it is a plain file of the effective user's,
    which others may not read."""
    if not stat.S_ISREG(found.st_mode):
        raise ConfigurationError(f"{path} is not a plain file; {way_out}")
    if found.st_uid != os.geteuid():
        raise ConfigurationError(
            f"{path} belongs to user {found.st_uid}, not to user {os.geteuid()} who reads "
            f"it: whoever owns it chose the {what} and can forge what it signs; {way_out}, "
            f"or, if it is this user's own, 'chown {os.geteuid()} {path}'"
        )
    if found.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(
            f"{path} is readable by others (mode {stat.filemode(found.st_mode)}): anyone who "
            f"reads it has the {what}; run 'chmod 600 {path}', or {way_out}"
        )


def _write(path: Path, *, replace: bool) -> None:
    """Written whole under another name, 0600 from the start (never readable by others,
    not even briefly), then put in place: replacing what is there, or linked, so that two
    processes making it together agree on the one linked first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        if replace:
            os.replace(partial, path)
        else:
            os.link(partial, path)
    except FileExistsError:
        pass  # another process made it first: its secret is the one
    finally:
        partial.unlink(missing_ok=True)
