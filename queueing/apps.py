from django.apps import AppConfig

from agentos_project.core.conf import current


class QueueingConfig(AppConfig):
    name = "queueing"
    verbose_name = "Job queue"

    def ready(self) -> None:
        from . import metrics, worker_signals

        worker_signals.connect()
        metrics.record_serve_restart(current().server)
