"""The bearer gates (CONTRACT 2, 3.7).

- `AGENTOS_SECURITY_KEY`, when set, guards every API endpoint but `/health`: no bearer token is 401
  `Authorization header required`, a wrong one 403 `Invalid authentication token`.
- `AGENTOS_ADMIN_TOKEN`, when set, guards `/queue/*`: anything but it is 403 `Job queue operations require an
  admin scope` (401 when a security key is set and no token was sent at all). It is accepted wherever the
  security key is, being the stronger credential. Without an admin token, `/queue/*` asks for the security key.

Tokens are compared in constant time. The Django admin (`/admin/`) has its own staff login and is not gated here.
"""

from __future__ import annotations

import hmac

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import NotAuthenticated, PermissionDenied
from rest_framework.permissions import BasePermission

from .conf import Security, current

MISSING = "Authorization header required"
WRONG = "Invalid authentication token"
NOT_ADMIN = "Job queue operations require an admin scope"


def bearer_token(request) -> str | None:
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_matches(token: str | None, expected: str | None) -> bool:
    return token is not None and expected is not None and hmac.compare_digest(token.encode(), expected.encode())


class KeyHolder:
    """The caller that presented a configured token; `admin` when it may operate the queue."""

    is_authenticated = True

    def __init__(self, *, admin: bool):
        self.admin = admin


def scope_of(token: str | None, security: Security) -> KeyHolder | None:
    """Who `token` makes its bearer: the admin token's holder, the security key's, or nobody."""
    if token_matches(token, security.admin_token):
        return KeyHolder(admin=True)
    if token_matches(token, security.security_key):
        return KeyHolder(admin=security.admin_token is None)
    return None


class SecurityKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        token = bearer_token(request)
        holder = scope_of(token, current().security)
        return None if holder is None else (holder, token)

    def authenticate_header(self, request) -> str:
        return "Bearer"


class SecurityKeyPermission(BasePermission):
    """With a security key set, the request must carry it (or the admin token)."""

    def has_permission(self, request, view) -> bool:
        if current().security.security_key is None or request.auth is not None:
            return True
        if bearer_token(request) is None:
            raise NotAuthenticated(MISSING)
        raise PermissionDenied(WRONG)


class QueueAdminPermission(BasePermission):
    """`/queue/*`: the admin token when one is set, else the security key when one is set, else open."""

    def has_permission(self, request, view) -> bool:
        security = current().security
        if security.admin_token is None:
            return SecurityKeyPermission().has_permission(request, view)
        if request.auth is not None and request.user.admin:
            return True
        if security.security_key is not None and bearer_token(request) is None:
            raise NotAuthenticated(MISSING)
        raise PermissionDenied(NOT_ADMIN)


class SecurityKeyScheme(OpenApiAuthenticationExtension):
    """How `/openapi.json` describes the tokens: an HTTP bearer token."""

    target_class = SecurityKeyAuthentication
    name = "securityKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "AGENTOS_SECURITY_KEY, when one is set; AGENTOS_ADMIN_TOKEN for /queue when one is set",
        }
