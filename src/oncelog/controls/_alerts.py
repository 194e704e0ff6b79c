"""Delivering budget alerts: a log line, the ledger's callback, the budget's webhook.
(Notices that a run needs a person travel the same way: ``_notices``.)

An alert is journalled before it is delivered and delivered only if the journal did not
hold it already (since its budget was last set), so a crash loop does not page someone
fifty times; the price is that a crash between the two loses that one delivery.
"""

from __future__ import annotations

from collections.abc import Callable

from .._exceptions import StoreUnavailable
from .._log import log
from .._webhook import post_json
from ..records._budgets import BudgetAlert
from ..stores._protocol import Store

AlertCallback = Callable[[BudgetAlert], None]


class AlertSender:
    """One per run in a process; remembers what it sent so each alert costs one journal
    look at most."""

    def __init__(self, store: Store, callback: AlertCallback | None) -> None:
        self.store = store
        self.callback = callback
        self._sent: set[tuple[str, str, str, str]] = set()

    def send(self, alert: BudgetAlert) -> None:
        """Journal the alert; deliver it if it is a warning, or an exceeded limit whose
        policy is ``escalate``. Delivery failures are logged, never raised: the run's own course
        (stop, pause) does not depend on anyone receiving the alert."""
        identity = (alert.kind, alert.scope, alert.target, alert.limit)
        if identity in self._sent:
            return
        self._sent.add(identity)
        try:
            if not self.store.record_alert(alert):
                return
        except StoreUnavailable as exc:
            log.warning("budget alert not journalled, so not sent (%s): %s", exc, alert.message)
            return
        if alert.kind == "exceeded" and alert.policy != "escalate":
            return  # journalled for the operator; the error raised for the step says the rest
        log.warning("budget %s for run %s: %s", alert.kind, alert.run_id, alert.message)
        if self.callback is not None:
            try:
                self.callback(alert)
            except Exception:
                log.exception("the on_budget_alert callback failed for %s", alert.message)
        if alert.webhook is not None:
            post_json(alert.webhook, alert.to_json(), alert.message)
