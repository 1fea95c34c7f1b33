"""Who is asking, from a verified JWT (AgentOS' JWT middleware, with PyJWT): the token's signature checked with the
keys of AGENTOS_JWT_VERIFICATION_KEYS (tried in order) or of the JWKS file AGENTOS_JWT_JWKS_FILE (`jwks`; the one
its `kid` names), its algorithm the one AGENTOS_JWT_ALGORITHM allows (never `none`), its expiry, and its audience when
AGENTOS_JWT_AUDIENCE is set. The caller is its `sub`, with the `session_id` and `scopes` claims it carries.

A refusal says why in AgentOS' words (`TokenRefused`), never with a key.
"""

from __future__ import annotations

import dataclasses

import jwt

from .conf import Security
from .jwks import jwks_file

ADMIN_SCOPE = "agent_os:admin"
EXPIRED = "Token has expired"
WRONG_AUDIENCE = "Invalid token audience - token not valid for this AgentOS instance"
NO_SUBJECT = "Invalid token subject"
MAX_ID = 255  # a user id or session id longer than the database keeps is no identity
LEEWAY_SECONDS = 10  # clock skew between the token's issuer and this server, as AgentOS allows


class TokenRefused(Exception):
    """The token cannot identify anyone; the message is the 401's detail."""


@dataclasses.dataclass(frozen=True)
class Caller:
    """A caller a verified JWT names: its `sub`, the session its token is bound to (if any), and its scopes."""

    user_id: str
    session_id: str | None
    scopes: frozenset[str]
    is_authenticated = True

    @property
    def admin(self) -> bool:
        return ADMIN_SCOPE in self.scopes


def verify(token: str, security: Security) -> Caller:
    """The caller `token` names, once its signature, algorithm, expiry and audience check out; else `TokenRefused`."""
    try:
        claims = _claims(token, security)
    except jwt.ExpiredSignatureError:
        raise TokenRefused(EXPIRED) from None
    except jwt.InvalidAudienceError:
        raise TokenRefused(WRONG_AUDIENCE) from None
    except jwt.MissingRequiredClaimError as error:
        raise TokenRefused(WRONG_AUDIENCE if error.claim == "aud" else f"Invalid token: {error}") from None
    except jwt.InvalidTokenError as error:
        raise TokenRefused(f"Invalid token: {error}") from None
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > MAX_ID:
        raise TokenRefused(NO_SUBJECT)
    scopes = claims.get("scopes") or []
    scopes = [scopes] if isinstance(scopes, str) else scopes if isinstance(scopes, list) else []
    session = claims.get("session_id")
    session = session if isinstance(session, str) and 0 < len(session) <= MAX_ID else None
    return Caller(subject, session, frozenset(str(scope) for scope in scopes))


def _claims(token: str, security: Security) -> dict:
    """The token's claims, from the first configured key that verifies it (the JWKS key its `kid` names first)."""
    options = {"algorithms": [security.jwt_algorithm], "audience": security.jwt_audience, "leeway": LEEWAY_SECONDS}
    if security.jwt_audience is None:
        options["options"] = {"verify_aud": False}
    keys = [*_jwks_keys(token, security.jwt_jwks_file), *security.jwt_verification_keys]
    last: jwt.InvalidTokenError = jwt.InvalidTokenError("No verification keys configured")
    for key in keys:
        try:
            return jwt.decode(token, key, **options)
        except (
            jwt.ExpiredSignatureError,
            jwt.ImmatureSignatureError,
            jwt.InvalidAudienceError,
            jwt.MissingRequiredClaimError,
        ):
            raise  # the signature was good: no other key tells anything else
        except jwt.InvalidTokenError as error:
            last = error
        except (jwt.InvalidKeyError, jwt.PyJWKError, TypeError, ValueError):
            last = jwt.InvalidSignatureError("Signature verification failed")  # a key of another kind: not this one
    raise last


def _jwks_keys(token: str, path: str | None) -> list:
    """The keys of the JWKS file to try: the one the token's `kid` names, or all when it names none (or none of
    them)."""
    if path is None:
        return []
    keys = jwks_file(path).keys()
    kid = jwt.get_unverified_header(token).get("kid")
    return [keys.named[kid]] if kid in keys.named else [*keys.named.values(), *keys.unnamed]
