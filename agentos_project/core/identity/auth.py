"""The bearer gates (CONTRACT 2, 3.7).

- `AGENTOS_SECURITY_KEY`, when set, guards every API endpoint but `/health`: no bearer token is 401
  `Authorization header required`, a wrong one 403 `Invalid authentication token`.
- `AGENTOS_ADMIN_TOKEN`, when set, guards `/queue/*`: anything but it is 403 `Job queue operations require an
  admin scope` (401 when a security key is set and no token was sent at all). It is accepted wherever the
  security key is, being the stronger credential. Without an admin token, `/queue/*` asks for the security key.

With JWT on (AGENTOS_JWT_VERIFICATION_KEYS or AGENTOS_JWT_JWKS_FILE, `tokens`), every API endpoint but `/health`
needs a bearer token: a JWT that verifies makes its `sub` the caller (`tokens.Caller`); no token is 401
`Authorization header missing`, a token that does not verify 401 with why (`Token has expired`, `Invalid token:
…`). The security key and the admin token stay accepted beside it, as the operator's own credentials; `/queue/*`
then also takes a JWT with the `agent_os:admin` scope.

Tokens are compared in constant time. The Django admin (`/admin/`) has its own staff login and is not gated here.
"""

from __future__ import annotations

import hmac

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated, PermissionDenied
from rest_framework.permissions import BasePermission

from ..conf import Security, current
from .tokens import Caller, TokenRefused, verify

MISSING = "Authorization header required"
WRONG = "Invalid authentication token"
NOT_ADMIN = "Job queue operations require an admin scope"
JWT_MISSING = "Authorization header missing"


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


class BearerAuthentication(BaseAuthentication):
    """Who the bearer token makes the caller: the admin token's or the security key's holder (`KeyHolder`), or with
    JWT on the `Caller` a JWT that verifies names (one that does not is 401 with why); nobody without a token."""

    def authenticate(self, request):
        token = bearer_token(request)
        security = current().security
        holder = scope_of(token, security)
        if holder is not None:
            return holder, token
        if token is None or not security.jwt:
            return None
        try:
            return verify(token, security), token
        except TokenRefused as refused:
            raise AuthenticationFailed(str(refused)) from None

    def authenticate_header(self, request) -> str:
        return "Bearer"


class BearerPermission(BasePermission):
    """With a security key set, the request must carry it (or the admin token); with JWT on, a bearer token that
    authenticated (a JWT or one of those)."""

    def has_permission(self, request, view) -> bool:
        security = current().security
        if request.auth is not None or (security.security_key is None and not security.jwt):
            return True
        if bearer_token(request) is None:
            raise NotAuthenticated(JWT_MISSING if security.jwt else MISSING)
        raise PermissionDenied(WRONG)


class QueueAdminPermission(BasePermission):
    """`/queue/*`: the admin token when one is set, else the security key when one is set, else open; with JWT
    on, also a JWT with the `agent_os:admin` scope."""

    def has_permission(self, request, view) -> bool:
        security = current().security
        if security.admin_token is None and not security.jwt:
            return BearerPermission().has_permission(request, view)
        if request.auth is not None and request.user.admin:
            return True
        if security.jwt and request.auth is None:
            return BearerPermission().has_permission(request, view)
        if security.security_key is not None and bearer_token(request) is None:
            raise NotAuthenticated(MISSING)
        raise PermissionDenied(NOT_ADMIN)


class BearerScheme(OpenApiAuthenticationExtension):
    """How `/openapi.json` describes the tokens: an HTTP bearer token."""

    target_class = BearerAuthentication
    name = "securityKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "AGENTOS_SECURITY_KEY, when one is set; AGENTOS_ADMIN_TOKEN for /queue when one is set",
        }


def token_identity(request, *, user_id: str | None, session_id: str | None) -> tuple[str | None, str | None]:
    """The user and session a request acts as: with a JWT, its `sub` (a `user_id` sent that differs is refused,
    403) and the session its token is bound to, if any (likewise); else what the request sent."""
    caller = request.user
    if not isinstance(caller, Caller):
        return user_id, session_id
    if user_id is not None and user_id != caller.user_id:
        raise PermissionDenied(f"user_id {user_id!r} is not the token's subject")
    if caller.session_id is not None and session_id is not None and session_id != caller.session_id:
        raise PermissionDenied(f"session_id {session_id!r} is not the token's session")
    return caller.user_id, session_id or caller.session_id


def run_access(request, *, session_id: str | None, user_id: str | None = None) -> tuple[str | None, str | None]:
    """How a request may reach an existing run: the session it names (checked against a session-bound token, as
    `token_identity` does, with the `user_id` it sent) and the user whose runs alone it sees (`runs_visible_to`)."""
    _, session_id = token_identity(request, user_id=user_id, session_id=session_id)
    return session_id, runs_visible_to(request)


def runs_visible_to(request) -> str | None:
    """The user whose runs alone the request may see and act on: a JWT caller's `sub`, unless its token has the
    `agent_os:admin` scope; None (every run) for an admin, the operator's keys, or without JWT."""
    caller = request.user
    return caller.user_id if isinstance(caller, Caller) and not caller.admin else None
