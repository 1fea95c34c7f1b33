"""Who is asking, from a verified JWT (AgentOS' JWT middleware, with PyJWT): the token's signature checked with the
keys of AGENTOS_JWT_VERIFICATION_KEYS (tried in order) or of the JWKS file AGENTOS_JWT_JWKS_FILE (`jwks`; the one
its `kid` names: a `kid` the file does not name is refused, unless a key without one verifies it), its algorithm
the one AGENTOS_JWT_ALGORITHM allows (never `none`), its expiry (which it must have, unless AGENTOS_JWT_REQUIRE_EXP
is false), its audience when AGENTOS_JWT_AUDIENCE is set, and its issuer when AGENTOS_JWT_ISSUER is. The caller is
its `sub`, with the `session_id` and `scopes` claims it carries.

A refusal says why in AgentOS' words (`TokenRefused`), never with a key.
"""

from __future__ import annotations

import dataclasses

import jwt

from ..conf import Security
from .jwks import jwks_file

ADMIN_SCOPE = "agent_os:admin"
EXPIRED = "Token has expired"
WRONG_AUDIENCE = "Invalid token audience - token not valid for this AgentOS instance"
NO_SUBJECT = "Invalid token subject"
NO_SESSION = "Invalid token session_id"
NO_ISSUER = 'Token is missing the "iss" claim. Issuer verification requires this claim to be present in the token.'
WRONG_ISSUER = "Invalid issuer. Expected: {expected}, got: {got}"
UNKNOWN_KID = 'Unable to find a signing key that matches: "{kid}"'  # PyJWT's words (AgentOS has none)
MAX_ID = 255  # a user id or session id longer than the database keeps is no identity
LEEWAY_SECONDS = 10  # clock skew between the token's issuer and this server, as AgentOS allows


class TokenRefused(Exception):
    """The token cannot identify anyone; the message is the 401's detail."""


class UnknownKid(jwt.InvalidTokenError):
    """The token's `kid` names no key of the JWKS file, and no key there is without one."""


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
    """The caller `token` names, once its signature, algorithm, expiry, audience and issuer check out; else
    `TokenRefused`."""
    try:
        claims = _claims(token, security)
        _check_issuer(claims, security.jwt_issuer)
    except jwt.ExpiredSignatureError:
        raise TokenRefused(EXPIRED) from None
    except jwt.InvalidAudienceError:
        raise TokenRefused(WRONG_AUDIENCE) from None
    except jwt.MissingRequiredClaimError as error:
        raise TokenRefused(WRONG_AUDIENCE if error.claim == "aud" else f"Invalid token: {error}") from None
    except jwt.InvalidTokenError as error:
        raise TokenRefused(f"Invalid token: {error}") from None
    subject, session = claims.get("sub"), claims.get("session_id") or None
    if not _storable_id(subject):
        raise TokenRefused(NO_SUBJECT)
    if session is not None and not _storable_id(session):
        raise TokenRefused(NO_SESSION)  # ignored, it would free a token bound to a session from it
    scopes = claims.get("scopes") or []
    scopes = [scopes] if isinstance(scopes, str) else scopes if isinstance(scopes, list) else []
    return Caller(subject, session, frozenset(str(scope) for scope in scopes))


def _storable_id(value: object) -> bool:
    """Whether a claim can be a user or session id: text of 1 to MAX_ID characters that PostgreSQL can store (no
    NUL, no lone surrogate, which UTF-8 cannot encode)."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID or "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _claims(token: str, security: Security) -> dict:
    """The token's claims, from the first configured key that verifies it (the JWKS key its `kid` names first)."""
    options = {
        "algorithms": [security.jwt_algorithm],
        "audience": security.jwt_audience,
        "leeway": LEEWAY_SECONDS,
        "options": {
            "verify_aud": security.jwt_audience is not None,
            "require": ["exp"] if security.jwt_require_exp else [],
        },
    }
    last: jwt.InvalidTokenError = jwt.InvalidTokenError("No verification keys configured")
    try:
        keys = _jwks_keys(token, security.jwt_jwks_file)
    except UnknownKid as unknown:
        keys, last = [], unknown  # the keys listed beside the file are no JWKS key: a `kid` does not name them
    keys += security.jwt_verification_keys
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
    """The keys of the JWKS file to try: the one the token's `kid` names; all when it has no `kid` or the file names
    none; else the file's keys without a `kid` (`UnknownKid` when there are none): a `kid` the file does not name is
    no other named key's."""
    if path is None:
        return []
    keys = jwks_file(path).keys()
    kid = jwt.get_unverified_header(token).get("kid")
    if kid is None or not keys.named:
        return [*keys.named.values(), *keys.unnamed]
    if kid in keys.named:
        return [keys.named[kid]]
    if not keys.unnamed:
        raise UnknownKid(UNKNOWN_KID.format(kid=kid))
    return list(keys.unnamed)


def _check_issuer(claims: dict, expected: str | None) -> None:
    """AgentOS' issuer check, once the signature is good: with an issuer set, the token's `iss` must be it."""
    if expected is None:
        return
    if claims.get("iss") is None:
        raise jwt.InvalidIssuerError(NO_ISSUER)
    if claims["iss"] != expected:
        raise jwt.InvalidIssuerError(WRONG_ISSUER.format(expected=expected, got=claims["iss"]))
