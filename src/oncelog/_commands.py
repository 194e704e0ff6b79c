"""The ``oncelog`` commands oncelog prints for a person to run (in an error, the log, a
notice, ``what_next``), built so that pasting one into a shell runs exactly that command.

Ids come from the ledger, and anyone who can start a run chooses them: each is quoted
for the shell (``shlex.quote``: a run id ``x;touch F;y`` stays one word), and an id with
a leading dash, which the command would read as an option, comes after ``--``
(positionals) or joined to its option with ``=``. An id holding a character that does
not show (a newline, ESC, a right-to-left override) is written in bash's and zsh's
``$'...'`` quotes with that character escaped: the command stays one visible line that
cannot drive the terminal it is printed on, and pastes as the exact id (a shell without
``$'...'`` reads another id, and finds no such run). The rest of a command (``--by NAME``,
``done|not_done|abandon``) is oncelog's own text: placeholders the person replaces."""

from __future__ import annotations

from collections.abc import Sequence


def oncelog_command(
    verb: str, ids: Sequence[str] = (), *, then: str = "", options: str = ""
) -> str:
    """``oncelog VERB IDS... THEN OPTIONS``: ``ids`` quoted, ``then`` (a positional
    placeholder) and ``options`` as written; with ``--`` before the positionals, and the
    options ahead of it, when an id starts with a dash."""
    positionals = [quoted(i) for i in ids] + ([then] if then else [])
    tail = [options] if options else []
    if any(i.startswith("-") for i in ids):
        return " ".join(["oncelog", verb, *tail, "--", *positionals])
    return " ".join(["oncelog", verb, *positionals, *tail])


def option(name: str, value: str) -> str:
    """``--name VALUE`` with the value quoted; ``--name=VALUE`` if it starts with a dash,
    so that it cannot be read as an option of its own."""
    if value.startswith("-"):
        return quoted(f"{name}={value}")
    return f"{name} {quoted(value)}"


def quoted(word: str) -> str:
    """``word`` as one shell word: ``shlex.quote``, or ``$'...'`` if a character in it
    does not show."""
    if word.isprintable():
        import shlex  # when a command is printed, not when a ledger is opened

        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(c) for c in word) + "'"


def _ansi_c(char: str) -> str:
    """``char`` inside ``$'...'``: one that does not show as its UTF-8 bytes, which bash
    writes whatever the locale (a ``\\u`` escape it expands only in a UTF-8 one)."""
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    return "".join(f"\\x{byte:02x}" for byte in char.encode())
