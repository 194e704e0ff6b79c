"""Text PostgreSQL cannot hold, held losslessly: the NUL character.

PostgreSQL's ``text`` refuses U+0000, which Python strings and SQLite hold; a NUL in a
tool's error message, a reason, a note or an id would otherwise be refused (or lost).
Every string bound for PostgreSQL is escaped with DLE (U+0010, "data link escape"): DLE
becomes DLE DLE and NUL becomes DLE ``0``; every ``text`` value read back is unescaped.
The mapping is a prefix code, so equality, ``hashtext`` and prefixes of escaped strings
are those of the originals. A string with neither character (nearly all) is bound as it
is, and canonical JSON never holds a raw control character, so JSON is never changed.

The journal's JSON spells the same characters ``\\u0000`` and ``\\u0010``, which
``jsonb`` refuses or reads raw; ``json_field`` rewrites them to the escaped form before
the cast, so a field read in SQL compares equal to the escaped string bound beside it.
"""

from __future__ import annotations

import re

import psycopg
from psycopg.adapt import AdaptersMap, Buffer
from psycopg.types.string import StrBinaryDumper, StrDumperUnknown, TextBinaryLoader, TextLoader

ESCAPE = "\x10"
NUL = "\x00"
_ESCAPED = re.compile(f"{ESCAPE}([{ESCAPE}0])")
_PLAIN = {ESCAPE: ESCAPE, "0": NUL}


def escape(text: str) -> str:
    if NUL not in text and ESCAPE not in text:
        return text
    return text.replace(ESCAPE, ESCAPE * 2).replace(NUL, ESCAPE + "0")


def unescape(text: str) -> str:
    """The string ``escape`` was given. A DLE followed by anything else (text written
    before escaping existed) is kept as it is."""
    if ESCAPE not in text:
        return text
    return _ESCAPED.sub(lambda found: _PLAIN[found.group(1)], text)


def json_field(column: str, key: str) -> str:
    """``column``'s JSON field ``key`` as text, escaped as ``escape`` would. Backslash
    pairs are first respelled ``\\u005c`` so that every remaining backslash starts an
    escape: ``\\\\u0000`` (a backslash, then ``u0000``) is not a NUL. The literals need
    ``standard_conforming_strings`` (set on every connection)."""
    respelled = f"replace({column}, '\\\\', '\\u005c')"
    respelled = f"replace({respelled}, '\\u0010', '\\u0010\\u0010')"
    respelled = f"replace({respelled}, '\\u0000', '\\u00100')"
    return f"({respelled}::jsonb ->> '{key}')"


# Each method does its parent's work itself (encoding, decoding) rather than calling it:
# replaying a run loads every text column of every step through ``load``, and the call to
# the parent doubled its cost.


class _Dumper(StrDumperUnknown):
    def dump(self, obj: str) -> Buffer | None:
        return escape(obj).encode(self._encoding)


class _BinaryDumper(StrBinaryDumper):
    def dump(self, obj: str) -> Buffer | None:
        return escape(obj).encode(self._encoding)


class _Loader(TextLoader):
    def load(self, data: Buffer) -> str:
        text = str(data, self._encoding or "utf-8")
        return text if ESCAPE not in text else unescape(text)


class _BinaryLoader(TextBinaryLoader):
    def load(self, data: Buffer) -> str:
        text = str(data, self._encoding or "utf-8")
        return text if ESCAPE not in text else unescape(text)


def _adapters() -> AdaptersMap:
    adapters = AdaptersMap(psycopg.adapters)
    # The text dumper last: the last one registered is the one ``%s`` uses.
    adapters.register_dumper(str, _BinaryDumper)
    adapters.register_dumper(str, _Dumper)
    for name in ("text", "varchar"):
        adapters.register_loader(name, _Loader)
        adapters.register_loader(name, _BinaryLoader)
    return adapters


ADAPTERS = _adapters()  # the ``context`` of every connection the stores make
