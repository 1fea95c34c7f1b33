"""Components by kind and id. Registration happens at start-up (apps.ready); lookups are read-only after."""

from __future__ import annotations

from .components import Component
from .events import KINDS


class ComponentNotFound(LookupError):
    pass


class Registry:
    def __init__(self) -> None:
        self._components: dict[tuple[str, str], Component] = {}

    def register(self, component: Component) -> Component:
        self._components[(component.kind, component.id)] = component
        return component

    def unregister(self, kind: str, component_id: str) -> None:
        self._components.pop((kind, component_id), None)

    def get(self, kind: str, component_id: str) -> Component:
        try:
            return self._components[(kind, component_id)]
        except KeyError:
            raise ComponentNotFound(f"{kind} {component_id!r} not found") from None

    def of_kind(self, kind: str) -> list[Component]:
        assert kind in KINDS
        return [c for (k, _), c in sorted(self._components.items()) if k == kind]


registry = Registry()
