"""``oncelog.notices``: a person-needed notice (``oncelog.PersonNeeded``) in the shapes
chat services take, so that a person decides from the message: each signed decision link
the notice carries becomes a button that opens the console's decision page (a URL
button: pressing it decides nothing until the page's "Confirm" is clicked).

``slack_blocks(notice)`` is the body of a Slack incoming webhook (Block Kit ``section``
and ``actions`` with ``button`` elements that have a ``url``); ``telegram_message(notice,
chat_id=...)`` is the body of the Bot API's ``sendMessage`` (an ``inline_keyboard`` of
``url`` buttons). ``posting(url, shape)`` is an ``on_alert`` callback that posts each
notice in that shape, as the ledger's own webhook posts (one deadline, no redirect
followed, the URL's token kept out of the logs); a failed post is tried again
(docs/notices.md has both recipes).
Everything shown comes from the ledger and is sent as plain text: Slack's ``mrkdwn`` and
Telegram's parse modes are not used, so nothing an agent recorded becomes a mention or a
link of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ._webhook import checked_url, post_json
from .controls._notices import PersonNeeded
from .records._budgets import BudgetAlert

__all__ = ["posting", "slack_blocks", "summary", "telegram_message"]

LABELS = {
    "done": "Done (it happened)",
    "not_done": "Not done (send again)",
    "abandon": "Abandon",
    "approve": "Approve",
    "deny": "Deny",
    "resume": "Clear the kill switch",
}
MAX_ARGS_CHARS = 1500  # a chat message is read on a phone: the page shows them whole
SLACK_TEXT_CHARS = 3000  # Slack refuses a section's text beyond this


def summary(notice: PersonNeeded) -> str:
    """The notice as plain text lines: what stopped, where, the effect, its key, its
    arguments (masked as the notice carries them) and where to look it up."""
    lines = [f"oncelog: run {notice.run_id} needs a person ({notice.error})"]
    if notice.step_id:
        lines.append(f"step: {notice.step_id}" + (f" (tool {notice.tool})" if notice.tool else ""))
    if notice.key:
        lines.append(f"key: {notice.key}")
    if notice.reason:
        lines.append(f"why: {notice.reason}")
    if notice.args is not None:
        args = json.dumps(notice.args, sort_keys=True, ensure_ascii=False)
        if len(args) > MAX_ARGS_CHARS:
            args = args[:MAX_ARGS_CHARS] + f"… ({len(args) - MAX_ARGS_CHARS} more characters)"
        lines.append(f"arguments: {args}")
    if notice.evidence_url:
        lines.append(f"look it up: {notice.evidence_url}")
    lines.append(notice.message)
    return "\n".join(lines)


def _buttons(notice: PersonNeeded) -> list[tuple[str, str]]:
    return [(LABELS.get(choice, choice), url) for choice, url in (notice.links or {}).items()]


def slack_blocks(notice: PersonNeeded) -> dict[str, Any]:
    """A Slack incoming webhook's body: the summary as a plain-text section, then one URL
    button per decision link."""
    text = summary(notice)[:SLACK_TEXT_CHARS]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "plain_text", "text": text, "emoji": False}}
    ]
    buttons = _buttons(notice)
    if buttons:
        blocks.append({
            "type": "actions",
            "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": label},
                 "url": url, "action_id": f"oncelog-{n}"}
                for n, (label, url) in enumerate(buttons)
            ],
        })  # fmt: skip
    # ``text`` is what a phone's notification shows (and Slack wants it with blocks).
    return {"text": f"oncelog: run {notice.run_id} needs a person", "blocks": blocks}


def telegram_message(notice: PersonNeeded, *, chat_id: str | int) -> dict[str, Any]:
    """A Telegram Bot API ``sendMessage`` body: the summary as plain text (no parse mode)
    and an inline keyboard of URL buttons, one row each."""
    message: dict[str, Any] = {"chat_id": chat_id, "text": summary(notice)[:4096]}
    buttons = _buttons(notice)
    if buttons:
        message["reply_markup"] = {
            "inline_keyboard": [[{"text": label, "url": url}] for label, url in buttons]
        }
    return message


class NotDelivered(Exception):
    """A chat service did not take a notice: the ledger delivers it again later."""


def posting(
    url: str, shape: Callable[[PersonNeeded], dict[str, Any]]
) -> Callable[[BudgetAlert | PersonNeeded], None]:
    """An ``on_alert`` callback that POSTs each person-needed notice to ``url`` as
    ``shape(notice)`` (``slack_blocks``, or ``functools.partial(telegram_message,
    chat_id=...)``). Budget alerts are left to their own webhook. A post that fails
    raises, so the notice stays undelivered and is sent again (docs/operations.md)."""
    checked_url(url, "the chat webhook URL")

    def post(alert: BudgetAlert | PersonNeeded) -> None:
        if not isinstance(alert, PersonNeeded):
            return
        if not post_json(url, json.dumps(shape(alert)), alert.message):
            raise NotDelivered(f"the notice {alert.id} was not delivered (logged)")

    return post
