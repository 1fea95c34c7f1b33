from django.apps import AppConfig

from agentos_project.conf import current

from .loading import register_configured_components


class AgentsRegistryConfig(AppConfig):
    name = "agents_registry"
    verbose_name = "Agents registry"

    def ready(self) -> None:
        register_configured_components(current().agents)
