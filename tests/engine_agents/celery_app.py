"""The Celery application of the tests, configured from the environment so that each test
has its own broker queue: ``$CELERY_BROKER``, ``$CELERY_BACKEND``, ``$CELERY_QUEUE``; the
ledger is ``$ONCELOG_URL``.

    celery -A tests.engine_agents.celery_app worker --pool=solo
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

import oncelog
from oncelog.integrations.celery import once_task

from . import provider_tool

app = Celery(
    "oncelog_tests",
    broker=os.environ.get("CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//"),
    backend=os.environ.get("CELERY_BACKEND", "rpc://"),
)
app.conf.update(
    task_default_queue=os.environ.get("CELERY_QUEUE", "oncelog-tests"),
    worker_prefetch_multiplier=1,  # a worker holds no message it is not working on
    # Redis gives an unacknowledged message to another worker after visibility_timeout
    # seconds, looking for such messages every unacked_restore_interval (times the
    # throttle); low, so the test need not wait an hour for a killed task's redelivery.
    broker_transport_options={
        "visibility_timeout": 5,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    broker_connection_retry_on_startup=True,
    result_expires=600,
)


@once_task(app, oncelog.open, backoff=0.5, backoff_max=2.0)
def send_order(run: oncelog.Run, order: str, probe: bool, seconds: float = 0.0) -> Any:
    return provider_tool.perform(run, order, probe=probe, seconds=seconds)
