"""Bearer-key gate: when AGENTOS_SECURITY_KEY is set, every endpoint but /health needs it."""

import hmac

from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from queueing.conf import current


def bearer_token(request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_matches(token: str | None, expected: str) -> bool:
    return token is not None and hmac.compare_digest(token.encode(), expected.encode())


class SecurityKeyPermission(BasePermission):
    def has_permission(self, request, view) -> bool:
        key = current().security_key
        if key is None or getattr(view, "public", False):
            return True
        if not token_matches(bearer_token(request), key):
            raise AuthenticationFailed("Invalid or missing bearer token")
        return True
