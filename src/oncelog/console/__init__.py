"""The web console: where a person approves, resolves and halts, with the evidence on the
same screen. Server-rendered pages over the ``Ledger`` API, local by default, behind a
token; ``oncelog console`` starts it.

Needs the ``console`` extra: ``pip install '.[console]'``.
"""

from __future__ import annotations

from importlib.util import find_spec

from oncelog import ConfigurationError

from ..display import install_line

# python-multipart is imported by Starlette only when a form is read: look for it now.
_missing = [name for name in ("starlette", "jinja2", "uvicorn") if find_spec(name) is None]
if find_spec("python_multipart") is None and find_spec("multipart") is None:
    _missing.append("python-multipart")
if _missing:
    raise ConfigurationError(f"the console needs {', '.join(_missing)}: {install_line('console')}")

from ._access import Access, is_loopback, url_host  # noqa: E402
from ._app import create_app  # noqa: E402
from ._serve import listen, serve  # noqa: E402
from ._token import DEFAULT_TOKEN_FILE, console_token  # noqa: E402

__all__ = [
    "DEFAULT_TOKEN_FILE",
    "Access",
    "console_token",
    "create_app",
    "is_loopback",
    "listen",
    "serve",
    "url_host",
]
