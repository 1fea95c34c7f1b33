"""The Celery app: `celery -A agentos_project worker` runs agentos workers (threads pool, acks late, prefetch 1).

What a worker does at start-up and shutdown (heartbeat, warm drain) is wired by `queueing.worker_signals`.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos_project.settings.base")

app = Celery("agentos_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["queueing"])
