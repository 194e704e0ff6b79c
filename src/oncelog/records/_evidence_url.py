"""Where a tool's effect is looked up at its provider: ``tool(evidence_url=...)``, a URL
template such as ``https://dashboard.example/payments?key={key}``, filled in with an
effect's idempotency key (and its run and step ids) wherever a person is shown the effect.

The template is checked when the tool is declared: only ``{key}``, ``{run}`` and
``{step}``, no format specs, and an http(s) URL with a host. Each value is
percent-encoded whole (``/``, ``?``, ``#`` and ``&`` included), so a key or a run id never
adds a path, a query or a fragment of its own: it stays one value where the template
put it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._exceptions import ConfigurationError

if TYPE_CHECKING:
    from ._records import JournalEntry

FIELDS = ("key", "run", "step")
HTTP = ("http://", "https://")


def checked_evidence_url(template: str) -> str:
    """``template`` if it is fit to declare, else ``ConfigurationError`` saying why."""
    # Imported here, as every URL module is: most agents declare no evidence URL.
    import string
    from urllib.parse import urlsplit

    if not isinstance(template, str):
        raise ConfigurationError(f"evidence_url must be a str, not {type(template).__name__}")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigurationError(f"evidence_url is not a template: {exc}") from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in FIELDS:
            raise ConfigurationError(
                f"evidence_url has the field {{{field}}}: it may use only "
                + ", ".join(f"{{{name}}}" for name in FIELDS)
            )
        if spec or conversion:
            raise ConfigurationError(f"evidence_url's {{{field}}} takes no format or conversion")
    marker = "oncelogfield"
    parts = urlsplit(fill(template, marker, marker, marker))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            "evidence_url must be an http(s) URL with a host, like "
            "https://dashboard.example/payments?key={key}"
        )
    if marker in parts.netloc:  # a key must not choose the host its lookup goes to
        raise ConfigurationError("evidence_url's fields go in its path or query, not its host")
    return template


def fill(template: str, key: str, run: str, step: str) -> str:
    """The template with each field percent-encoded whole."""
    from urllib.parse import quote

    return template.format(
        key=quote(key, safe=""), run=quote(run, safe=""), step=quote(step, safe="")
    )


def evidence_urls(journal: Iterable[JournalEntry]) -> dict[str, str]:
    """Each step's evidence URL, by step id, as a run's journal holds them: a run that
    stopped for a person journals its notice, and the notice carries the URL filled in
    (the declaration lives in the agent's code, which no other process reads). A step
    that never stopped a run has none."""
    found: dict[str, str] = {}
    for entry in journal:
        if entry.event != "person_needed":
            continue
        step, url = entry.data.get("step_id"), entry.data.get("evidence_url")
        # Only a link a browser opens as a page: a journal written by anything else than
        # a checked declaration never puts a ``javascript:`` URL on a page.
        if isinstance(step, str) and isinstance(url, str) and url.startswith(HTTP):
            found[step] = url
    return found
