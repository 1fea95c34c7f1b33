from django.apps import AppConfig

from queueing.executor import register_executor


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from .executor import RunExecutor  # imports the models: only once the apps are loaded

        register_executor(RunExecutor())
