"""What the identity tests share: keys, signed tokens, JWKS documents, a submit that carries a token, and a client
that answers a server error as the client would see it."""

from __future__ import annotations

import datetime
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from rest_framework.test import APIClient

SECRET = "a-string-secret-at-least-256-bits-long"
HS256 = {"jwt_verification_keys": (SECRET,), "jwt_algorithm": "HS256"}
SUBMIT = {"message": "hi sleep=0", "stream": "false", "background": "true"}


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def token(key, algorithm: str = "HS256", *, expires_in: float | None = 600, headers: dict | None = None, **claims):
    """A token of `claims` signed with `key`: Ada's unless they say otherwise, with no `exp` when `expires_in` is
    None."""
    claims = {"sub": "ada"} | claims
    if expires_in is not None:
        claims.setdefault("exp", datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_in))
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers)


def bearer(value: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {value}"}


def submitted_by(api, value: str, **fields):
    return api.post("/agents/stub-agent/runs", {**SUBMIT, **fields}, **bearer(value))


def jwks_of(**keys) -> str:
    """A JWKS document of RSA public keys, by kid."""
    entries = [
        {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": kid} for kid, key in keys.items()
    ]
    return json.dumps({"keys": entries})


@pytest.fixture
def client() -> APIClient:
    """An API client that gets a server error as its 500 answer, not as an exception raised into the test."""
    return APIClient(raise_request_exception=False)
