from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from queueing.executor import register_executor

        from .executor import RunExecutor

        register_executor(RunExecutor())
