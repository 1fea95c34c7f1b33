from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Development only: the `bench` and `demo` commands. Nothing the service runs imports this app."""

    name = "bench"
    verbose_name = "Benchmarks and demo"
