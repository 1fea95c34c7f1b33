"""AgentOS' scopes, enforced per endpoint with AGENTOS_AUTHORIZATION=true (JWT callers only: the operator's keys
are not scoped).

A scope is `resource:action` (every resource of that type), `resource:<id>:action` (one), `resource:*:action`
(any), or `agent_os:admin` (everything); `system:` is read as `config:`, as AgentOS does. A view names what it
needs with `scope = (resource, action)` (the resource `"component"` stands for its kind's plural, the id for its
`component_id`); a missing scope is 403 `Insufficient permissions. Required scope(s): <scope>`. A listing needs
none: as AgentOS does, it shows what the caller may read (`visible`), maybe nothing.

One reading holds with AGENTOS_AUTHORIZATION off too: what names every user and worker (`/metrics`' user ids and
host names) is the operator's, and a JWT caller is one only with a `read` scope on it or `agent_os:admin`
(`is_operator`).
"""

from __future__ import annotations

from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

from ..conf import current
from .tokens import ADMIN_SCOPE, Caller

ALIASES = {"system": "config"}
COMPONENT = "component"
READ_OR_RUN = ("read", "run")  # what /config lists of each kind, as AgentOS' does


def _parsed(scope: str) -> tuple[str, str | None, str] | None:
    """(resource, id or None, action) of a scope; None for one that is not of AgentOS' shapes."""
    parts = scope.split(":")
    if len(parts) == 2:
        resource, action = parts
        return ALIASES.get(resource, resource), None, action
    if len(parts) == 3:
        resource, resource_id, action = parts
        return ALIASES.get(resource, resource), resource_id, action
    return None


def allows(scopes: frozenset[str], resource: str, action: str, resource_id: str | None = None) -> bool:
    """Whether `scopes` grant `action` on `resource` (on the one `resource_id` names, when it names one)."""
    if ADMIN_SCOPE in scopes:
        return True
    for scope in scopes:
        parsed = _parsed(scope)
        if parsed is None or (parsed[0], parsed[2]) != (resource, action):
            continue
        if parsed[1] in (None, "*") or parsed[1] == resource_id:
            return True
    return False


def readable_ids(scopes: frozenset[str], resource: str, actions: tuple[str, ...] = ("read",)) -> set[str] | None:
    """The ids of `resource` a listing shows, as AgentOS filters it: None for all (an `actions` scope on every one of
    them), else those a scope names for one of `actions` (maybe none)."""
    if any(allows(scopes, resource, action) for action in actions):
        return None
    named = set()
    for scope in scopes:
        parsed = _parsed(scope)
        if parsed is not None and parsed[0] == resource and parsed[1] not in (None, "*") and parsed[2] in actions:
            named.add(parsed[1])
    return named


def scoped_caller(request) -> Caller | None:
    """The JWT caller whose scopes apply to `request` (AGENTOS_AUTHORIZATION on), or None: nothing to check."""
    caller = request.user
    if not current().security.authorization or not isinstance(caller, Caller) or caller.admin:
        return None
    return caller


def is_operator(request, resource: str) -> bool:
    """Whether the caller may see what `resource` shows of every user and worker (user ids, host names): anyone but
    a JWT caller (the operator's keys, or everyone when no credential is set), and a JWT caller with a `read` scope
    on `resource` or `agent_os:admin`, whether or not AGENTOS_AUTHORIZATION is on."""
    caller = request.user
    return not isinstance(caller, Caller) or allows(caller.scopes, resource, "read")


def visible(request, resource: str, components: list, actions: tuple[str, ...] = ("read",)) -> list:
    """`components` (of `resource`, e.g. agents) as the caller may list them: all, or those its scopes name for one
    of `actions`."""
    caller = scoped_caller(request)
    ids = None if caller is None else readable_ids(caller.scopes, resource, actions)
    return components if ids is None else [component for component in components if component.id in ids]


class ScopePermission(BasePermission):
    """The scope a view names (`scope`), checked for a JWT caller when AGENTOS_AUTHORIZATION is on."""

    def has_permission(self, request, view) -> bool:
        caller, needed = scoped_caller(request), getattr(view, "scope", None)
        if caller is None or needed is None:
            return True
        resource, action = needed
        resource_id = None
        if resource == COMPONENT:
            resource, resource_id = f"{view.kind}s", view.kwargs.get("component_id")
        if allows(caller.scopes, resource, action, resource_id):
            return True
        raise PermissionDenied(f"Insufficient permissions. Required scope(s): {resource}:{action}")
