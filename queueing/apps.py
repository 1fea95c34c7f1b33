from django.apps import AppConfig


class QueueingConfig(AppConfig):
    name = "queueing"
    verbose_name = "Job queue"

    def ready(self) -> None:
        from . import lifecycle

        lifecycle.connect()
