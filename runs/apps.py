from django.apps import AppConfig

from queueing.seam import register_executor


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from queueing import shutdown  # these import the models: only once the apps are loaded

        from .events.publish import sender
        from .services.queue_executor import RunExecutor

        register_executor(RunExecutor())
        shutdown.before_exit(lambda: sender.flush(2))
