from django.apps import AppConfig


class AgentsRegistryConfig(AppConfig):
    name = "agents_registry"
    verbose_name = "Agents registry"

    def ready(self) -> None:
        from agentos_project.conf import current

        from . import loading

        loading.register_configured_components(current().agents)
