"""Bearer-key gate: when AGENTOS_SECURITY_KEY is set, every endpoint but /health needs it (401 otherwise)."""

from __future__ import annotations

import hmac

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from .conf import current


def bearer_token(request) -> str | None:
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_matches(token: str | None, expected: str) -> bool:
    return token is not None and hmac.compare_digest(token.encode(), expected.encode())


class KeyHolder:
    """The caller that presented a configured key."""

    is_authenticated = True

    def __init__(self, scope: str):
        self.scope = scope


class SecurityKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        key = current().security.security_key
        token = bearer_token(request)
        if key is None or token is None:
            return None
        if not token_matches(token, key):
            raise AuthenticationFailed("Invalid bearer token")
        return KeyHolder("security_key"), token

    def authenticate_header(self, request) -> str:
        return "Bearer"


class SecurityKeyPermission(BasePermission):
    message = "Authentication required: send Authorization: Bearer <AGENTOS_SECURITY_KEY>"

    def has_permission(self, request, view) -> bool:
        return current().security.security_key is None or request.auth is not None


class SecurityKeyScheme(OpenApiAuthenticationExtension):
    """How `/openapi.json` describes the security key: an HTTP bearer token."""

    target_class = SecurityKeyAuthentication
    name = "securityKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "AGENTOS_SECURITY_KEY, when one is set"}
