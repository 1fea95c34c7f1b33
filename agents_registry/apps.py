import sys

from django.apps import AppConfig

from agentos_project.core.conf import current

from .loading import ComponentsRefused, register_configured_components


class AgentsRegistryConfig(AppConfig):
    name = "agents_registry"
    verbose_name = "Agents registry"

    def ready(self) -> None:
        """Register the configured components in every process (web, worker, commands); components that cannot
        be loaded stop the process before it serves anything, with one line that says why."""
        try:
            register_configured_components(current().agents)
        except ComponentsRefused as refusal:
            sys.stderr.write(f"agentos: {refusal}\n")
            raise SystemExit(2) from None
