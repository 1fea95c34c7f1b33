"""Identity from a verified JWT (issue 31): HS256 and RS256 keys, a JWKS file, and each way a token is refused, with
AgentOS' status and detail; the token's subject is the run's user."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from runs.models import AgentSession, Run
from tests.agentos_project.core.identity.conftest import (
    HS256,
    SECRET,
    SUBMIT,
    bearer,
    jwks_of,
    public_pem,
    rsa_key,
    submitted_by,
    token,
)
from tests.support.conf import with_conf

pytestmark = pytest.mark.django_db
WRONG_AUDIENCE = "Invalid token audience - token not valid for this AgentOS instance"


@with_conf("security", **HS256)
def test_an_hs256_token_makes_its_subject_the_runs_user(api):
    response = submitted_by(api, token(SECRET))

    assert response.status_code == 202, response.content
    assert Run.objects.get(pk=response.json()["run_id"]).user_id == "ada"


def test_an_rs256_token_is_verified_with_the_public_key(api):
    key = rsa_key()
    with with_conf("security", jwt_verification_keys=(public_pem(key),), jwt_algorithm="RS256"):
        accepted = submitted_by(api, token(key, "RS256"))
        forged = submitted_by(api, token(rsa_key(), "RS256"))

    assert accepted.status_code == 202
    assert (forged.status_code, forged.json()) == (401, {"detail": "Invalid token: Signature verification failed"})


def test_the_keys_are_tried_in_order(api):
    old, new = rsa_key(), rsa_key()
    with with_conf("security", jwt_verification_keys=(public_pem(old), public_pem(new)), jwt_algorithm="RS256"):
        assert submitted_by(api, token(new, "RS256")).status_code == 202
        assert submitted_by(api, token(old, "RS256")).status_code == 202


def test_a_jwks_file_gives_the_key_each_tokens_kid_names(api, tmp_path):
    first, second = rsa_key(), rsa_key()
    document = {"keys": []}
    for kid, key in (("k1", first), ("k2", second)):
        entry = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        document["keys"].append({**entry, "kid": kid, "use": "sig", "alg": "RS256"})
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(document))

    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"):
        by_second = submitted_by(api, token(second, "RS256", headers={"kid": "k2"}))
        by_first = submitted_by(api, token(first, "RS256", headers={"kid": "k1"}))
        misnamed = submitted_by(api, token(second, "RS256", headers={"kid": "k1"}))
        unnamed = submitted_by(api, token(first, "RS256"))

    assert (by_second.status_code, by_first.status_code, unnamed.status_code) == (202, 202, 202)
    assert (misnamed.status_code, misnamed.json()) == (401, {"detail": "Invalid token: Signature verification failed"})


@with_conf("security", **HS256, jwt_audience="agentos-prod")
@pytest.mark.parametrize(
    ("made", "detail"),
    [
        (lambda: token(SECRET, aud="agentos-prod", expires_in=-60), "Token has expired"),
        (lambda: token(SECRET, aud="agentos-dev"), WRONG_AUDIENCE),
        (lambda: token(SECRET), WRONG_AUDIENCE),
        (lambda: token("another-secret-at-least-256-bits-long!!", aud="agentos-prod"),
         "Invalid token: Signature verification failed"),
        (lambda: token(None, "none", aud="agentos-prod"), "Invalid token: The specified alg value is not allowed"),
        (lambda: "not-a-jwt", "Invalid token: Not enough segments"),
        (lambda: token(SECRET, aud="agentos-prod", sub=""), "Invalid token subject"),
    ],
    ids=["expired", "wrong audience", "no audience", "another key", "alg none", "malformed", "no subject"],
)  # fmt: skip
def test_a_token_that_does_not_verify_is_refused_with_why_and_nothing_is_written(api, made, detail):
    response = submitted_by(api, made())

    assert (response.status_code, response.json()) == (401, {"detail": detail})
    assert response["WWW-Authenticate"] == "Bearer"
    assert not Run.objects.exists() and not AgentSession.objects.exists()


@with_conf("security", **HS256)
@pytest.mark.parametrize("path", ["/config", "/agents", "/agents/stub-agent/runs/x?session_id=s", "/queue/jobs"])
def test_with_jwt_on_every_endpoint_but_health_wants_a_token(api, path):
    missing = api.get(path)

    assert (missing.status_code, missing.json()) == (401, {"detail": "Authorization header missing"})
    assert api.get("/health").status_code == 200


@with_conf("security", **HS256)
def test_a_user_id_that_is_not_the_tokens_subject_is_refused_and_nothing_is_written(api):
    refused = submitted_by(api, token(SECRET), user_id="grace")
    same = submitted_by(api, token(SECRET), user_id="ada")

    assert (refused.status_code, refused.json()) == (403, {"detail": "user_id 'grace' is not the token's subject"})
    assert same.status_code == 202
    assert list(Run.objects.values_list("user_id", flat=True)) == ["ada"]


@with_conf("security", **HS256)
def test_a_token_bound_to_a_session_runs_there_and_only_there(api):
    bound = token(SECRET, session_id="chat-7")

    implied = submitted_by(api, bound)
    other = submitted_by(api, bound, session_id="chat-8")

    assert implied.status_code == 202 and implied.json()["session_id"] == "chat-7"
    assert (other.status_code, other.json()) == (403, {"detail": "session_id 'chat-8' is not the token's session"})


@with_conf("security", **HS256, security_key="s3cret")
def test_the_queue_takes_an_admin_scoped_token_and_the_security_key_beside_jwt(api):
    user, admin = token(SECRET), token(SECRET, scopes=["agent_os:admin"])

    assert (api.get("/queue/jobs", **bearer(user)).status_code, api.get("/queue/jobs", **bearer(user)).json()) == (
        403,
        {"detail": "Job queue operations require an admin scope"},
    )
    assert api.get("/queue/jobs", **bearer(admin)).status_code == 200
    assert api.get("/queue/jobs", **bearer("s3cret")).status_code == 200
    assert api.get("/config", **bearer("s3cret")).status_code == 200


SCOPED = {**HS256, "authorization": True}
INSUFFICIENT = "Insufficient permissions. Required scope(s): {}"


def scoped(*scopes: str, sub: str = "ada") -> str:
    return token(SECRET, sub=sub, scopes=list(scopes))


@with_conf("security", **SCOPED)
def test_a_token_scoped_to_one_agent_runs_that_agent_and_no_other(api):
    one = scoped("agents:stub-agent:run")

    ran = submitted_by(api, one)
    other = api.post("/agents/hitl-agent/runs", SUBMIT, **bearer(one))
    team = api.post("/teams/stub-team/runs", SUBMIT, **bearer(one))

    assert ran.status_code == 202
    assert (other.status_code, other.json()) == (
        403,
        {"detail": "Insufficient permissions. Required scope(s): agents:run"},
    )
    assert (team.status_code, team.json()) == (
        403,
        {"detail": "Insufficient permissions. Required scope(s): teams:run"},
    )
    assert Run.objects.count() == 1


@with_conf("security", **SCOPED)
@pytest.mark.parametrize(
    ("scopes", "allowed"),
    [
        (["agents:run"], True),
        (["agents:*:run"], True),
        (["agents:stub-agent:read"], False),
        (["teams:run"], False),
        (["agent_os:admin"], True),
        ([], False),
    ],
)
def test_running_an_agent_wants_a_run_scope_on_it(api, scopes, allowed):
    assert (submitted_by(api, scoped(*scopes)).status_code == 202) is allowed


@with_conf("security", **SCOPED)
def test_listings_and_config_show_only_what_the_token_may_read(api):
    one = scoped("agents:stub-agent:read", "config:read")
    every = scoped("agents:read", "system:read")

    assert [agent["id"] for agent in api.get("/agents", **bearer(one)).json()] == ["stub-agent"]
    assert [agent["id"] for agent in api.get("/config", **bearer(one)).json()["agents"]] == ["stub-agent"]
    assert api.get("/config", **bearer(one)).json()["teams"] == []
    assert len(api.get("/agents", **bearer(every)).json()) > 1
    assert api.get("/config", **bearer(every)).status_code == 200, "system:read is config:read"
    assert api.get("/agents/hitl-agent", **bearer(one)).status_code == 403
    assert api.get("/agents", **bearer(scoped("agents:hitl-agent:run"))).json() == [], "a listing shows what it reads"
    assert api.get("/agents", **bearer(scoped("sessions:read"))).json() == []
    ran = scoped("agents:hitl-agent:run", "config:read")
    assert [agent["id"] for agent in api.get("/config", **bearer(ran)).json()["agents"]] == ["hitl-agent"]
    refused = api.get("/config", **bearer(scoped("agents:read")))
    assert (refused.status_code, refused.json()) == (
        403,
        {"detail": "Insufficient permissions. Required scope(s): config:read"},
    )
    assert api.get("/metrics", **bearer(scoped("metrics:read"))).status_code == 200
    assert api.get("/metrics", **bearer(one)).status_code == 403


@with_conf("security", **HS256)
def test_without_authorization_scopes_are_not_checked(api):
    assert submitted_by(api, scoped()).status_code == 202
    assert len(api.get("/agents", **bearer(scoped())).json()) > 1


NOT_ALLOWED = "The specified alg value is not allowed"


def hmac_signed(secret: bytes) -> str:
    """An HS256 token signed with `secret` by hand (PyJWT refuses to use a public key as an HMAC secret): the
    algorithm confusion an RS256 deployment must refuse."""

    def part(value: bytes) -> str:
        return base64.urlsafe_b64encode(value).rstrip(b"=").decode()

    header = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = part(json.dumps({"sub": "mallory", "exp": 4102444800}).encode())
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{part(signature)}"


def test_keys_of_another_kind_are_passed_over_not_a_crash(api, tmp_path):
    rsa_signer, ec_signer = rsa_key(), ec.generate_private_key(ec.SECP256R1())
    document = {"keys": [
        {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_signer.public_key())), "kid": "ec"},
        {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_signer.public_key())), "kid": "rsa"},
        {"kty": "oct", "kid": "enc", "use": "enc", "alg": "A256GCM", "k": "bad"},
    ]}  # fmt: skip
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(document))
    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"):
        unnamed = submitted_by(api, token(rsa_signer, "RS256"))
        misnamed = submitted_by(api, token(rsa_signer, "RS256", headers={"kid": "ec"}))
    with with_conf("security", jwt_verification_keys=(SECRET, public_pem(rsa_signer)), jwt_algorithm="RS256"):
        mixed = submitted_by(api, token(rsa_signer, "RS256"))
        confused = submitted_by(api, hmac_signed(public_pem(rsa_signer).encode()))

    assert (unnamed.status_code, mixed.status_code) == (202, 202)
    assert (misnamed.status_code, misnamed.json()) == (401, {"detail": "Invalid token: Signature verification failed"})
    assert (confused.status_code, confused.json()) == (
        401,
        {"detail": "Invalid token: The specified alg value is not allowed"},
    )


@with_conf("security", **HS256)
def test_a_little_clock_skew_is_forgiven_and_odd_claims_are_no_identity(api):
    ahead = token(SECRET, iat=int(datetime.datetime.now(datetime.UTC).timestamp()) + 5)
    long_sub = token(SECRET, sub="x" * 300)
    odd_scopes = token(SECRET, scopes=5)

    assert submitted_by(api, ahead).status_code == 202
    assert (submitted_by(api, long_sub).status_code, submitted_by(api, long_sub).json()) == (
        401,
        {"detail": "Invalid token subject"},
    )
    assert submitted_by(api, odd_scopes).status_code == 202


@with_conf("security", **HS256)
def test_a_session_bound_token_polls_and_cancels_in_its_session_only(api):
    bound = token(SECRET, session_id="chat-7")
    run_id = submitted_by(api, bound).json()["run_id"]

    own = api.get(f"/agents/stub-agent/runs/{run_id}", {"session_id": "chat-7"}, **bearer(bound))
    other = api.get(f"/agents/stub-agent/runs/{run_id}", {"session_id": "chat-8"}, **bearer(bound))

    assert own.status_code == 200
    assert (other.status_code, other.json()) == (403, {"detail": "session_id 'chat-8' is not the token's session"})


ISSUER = "https://idp.example.com"


def test_with_an_issuer_set_a_token_must_name_it_and_is_refused_in_agentos_words(api):
    with with_conf("security", **HS256, jwt_issuer=ISSUER):
        named = submitted_by(api, token(SECRET, iss=ISSUER))
        missing = submitted_by(api, token(SECRET))
        other = submitted_by(api, token(SECRET, iss="https://other.example.com"))

    assert named.status_code == 202
    assert (missing.status_code, missing.json()) == (
        401,
        {
            "detail": 'Invalid token: Token is missing the "iss" claim. Issuer verification requires this claim to be '
            "present in the token."
        },
    )
    assert (other.status_code, other.json()) == (
        401,
        {"detail": f"Invalid token: Invalid issuer. Expected: {ISSUER}, got: https://other.example.com"},
    )
    assert Run.objects.count() == 1


@with_conf("security", **HS256)
def test_a_token_without_an_expiry_is_refused(api):
    response = submitted_by(api, token(SECRET, expires_in=None))

    assert (response.status_code, response.json()) == (
        401,
        {"detail": 'Invalid token: Token is missing the "exp" claim'},
    )
    assert not Run.objects.exists()


def test_a_token_without_an_expiry_is_taken_when_expiry_is_not_required(api):
    with with_conf("security", **HS256, jwt_require_exp=False):
        response = submitted_by(api, token(SECRET, expires_in=None))

    assert response.status_code == 202


def test_a_kid_the_jwks_file_does_not_name_is_refused_not_tried_on_every_key(api, tmp_path):
    named, unnamed, listed = rsa_key(), rsa_key(), rsa_key()
    only_named, mixed = tmp_path / "named.json", tmp_path / "mixed.json"
    only_named.write_text(jwks_of(k1=named))
    document = json.loads(jwks_of(k1=named))
    document["keys"].append(json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(unnamed.public_key())))
    mixed.write_text(json.dumps(document))
    with with_conf("security", jwt_jwks_file=str(only_named), jwt_algorithm="RS256"):
        unknown = submitted_by(api, token(named, "RS256", headers={"kid": "k9"}))
        known = submitted_by(api, token(named, "RS256", headers={"kid": "k1"}))
    with with_conf("security", jwt_jwks_file=str(mixed), jwt_algorithm="RS256"):
        not_unnamed = submitted_by(api, token(named, "RS256", headers={"kid": "k9"}))
        by_unnamed = submitted_by(api, token(unnamed, "RS256", headers={"kid": "k9"}))
    beside = {"jwt_verification_keys": (public_pem(listed),), "jwt_jwks_file": str(only_named)}
    with with_conf("security", **beside, jwt_algorithm="RS256"):
        by_listed = submitted_by(api, token(listed, "RS256", headers={"kid": "k9"}))

    assert (unknown.status_code, unknown.json()) == (
        401,
        {"detail": 'Invalid token: Unable to find a signing key that matches: "k9"'},
    )
    assert (not_unnamed.status_code, not_unnamed.json()) == (
        401,
        {"detail": "Invalid token: Signature verification failed"},
    ), "an unknown kid may be a key without one, never another named key"
    assert (known.status_code, by_unnamed.status_code, by_listed.status_code) == (202, 202, 202)


@with_conf("security", **HS256)
@pytest.mark.parametrize("claim", ["sub", "session_id"])
@pytest.mark.parametrize("odd", ["ada\x00", "ada\ud800"], ids=["NUL", "lone surrogate"])
def test_a_subject_or_session_postgresql_cannot_store_is_refused_on_submit_and_poll(client, claim, odd):
    run_id = submitted_by(client, token(SECRET, session_id="chat-1")).json()["run_id"]
    signed = token(SECRET, **{claim: odd})
    poll = {} if claim == "session_id" else {"session_id": "chat-1"}  # a session-bound token polls in its own

    submitted = submitted_by(client, signed)
    polled = client.get(f"/agents/stub-agent/runs/{run_id}", poll, **bearer(signed))

    detail = {"detail": {"sub": "Invalid token subject", "session_id": "Invalid token session_id"}[claim]}
    assert (submitted.status_code, submitted.json()) == (401, detail)
    assert (polled.status_code, polled.json()) == (401, detail)
    assert Run.objects.count() == 1 and AgentSession.objects.count() == 1


@with_conf("security", **HS256)
@pytest.mark.parametrize("session_id", [5, ["chat-1"], "x" * 300], ids=["a number", "a list", "too long"])
def test_a_session_claim_that_names_no_session_is_refused_not_ignored(api, session_id):
    response = submitted_by(api, token(SECRET, session_id=session_id))

    assert (response.status_code, response.json()) == (401, {"detail": "Invalid token session_id"})
    assert not Run.objects.exists()


@with_conf("security", **HS256)
def test_an_empty_session_claim_binds_the_token_to_no_session(api):
    response = submitted_by(api, token(SECRET, session_id=""), session_id="chat-3")

    assert (response.status_code, response.json()["session_id"]) == (202, "chat-3")
