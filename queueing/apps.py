from django.apps import AppConfig


class QueueingConfig(AppConfig):
    name = "queueing"
    verbose_name = "Job queue"
