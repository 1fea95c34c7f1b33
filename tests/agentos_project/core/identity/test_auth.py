"""The bearer gates (CONTRACT 2, 3.7): the security key on every endpoint but /health, the admin token on /queue."""

from __future__ import annotations

import pytest

from tests.support.conf import with_conf

pytestmark = pytest.mark.django_db
UNKNOWN_JOB = "/queue/jobs/00000000-0000-0000-0000-000000000000"
UNKNOWN_RUN = "/agents/stub-agent/runs/x?session_id=s"
API = ["/config", "/agents", "/openapi.json", UNKNOWN_RUN, "/metrics"]
QUEUE = ["/queue/jobs", "/queue/stats", UNKNOWN_JOB]
ANSWERED = {UNKNOWN_JOB: 404, UNKNOWN_RUN: 404}  # past the gate: what the endpoint itself says
NOT_ADMIN = {"detail": "Job queue operations require an admin scope"}


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@with_conf("security", security_key="s3cret")
@pytest.mark.parametrize("path", API + QUEUE)
def test_the_security_key_guards_every_endpoint(api, path):
    missing, wrong, right = api.get(path), api.get(path, **bearer("wrong")), api.get(path, **bearer("s3cret"))

    assert (missing.status_code, missing.json()) == (401, {"detail": "Authorization header required"})
    assert missing["WWW-Authenticate"] == "Bearer"
    assert (wrong.status_code, wrong.json()) == (403, {"detail": "Invalid authentication token"})
    assert right.status_code == ANSWERED.get(path, 200)


@with_conf("security", security_key="s3cret")
def test_health_and_a_submit_under_the_security_key(api):
    submit = {"message": "hi sleep=0", "stream": "false"}

    assert api.get("/health").status_code == 200
    assert api.post("/agents/stub-agent/runs", submit).status_code == 401
    assert api.post("/agents/stub-agent/runs", submit, **bearer("S3CRET")).status_code == 403
    assert api.get("/health", **bearer("wrong")).status_code == 200


@with_conf("security", security_key="s3cret")
def test_a_token_of_another_scheme_is_no_token(api):
    response = api.get("/config", HTTP_AUTHORIZATION="Basic czNjcmV0")

    assert response.status_code == 401


@with_conf("security", admin_token="adm1n")
@pytest.mark.parametrize("path", QUEUE)
def test_the_admin_token_guards_the_queue(api, path):
    missing, wrong, right = api.get(path), api.get(path, **bearer("wrong")), api.get(path, **bearer("adm1n"))

    assert (missing.status_code, missing.json()) == (403, NOT_ADMIN)
    assert (wrong.status_code, wrong.json()) == (403, NOT_ADMIN)
    assert right.status_code == ANSWERED.get(path, 200)
    assert api.get("/config").status_code == 200  # no security key: the rest stays open


@with_conf("security", admin_token="adm1n")
def test_the_admin_gate_covers_requeue(api):
    response = api.post("/queue/jobs/00000000-0000-0000-0000-000000000000/requeue", **bearer("nope"))

    assert (response.status_code, response.json()) == (403, NOT_ADMIN)


@with_conf("security", security_key="s3cret", admin_token="adm1n")
def test_with_both_the_key_opens_the_api_and_only_the_admin_token_the_queue(api):
    assert api.get("/queue/stats").status_code == 401
    assert (
        api.get("/queue/stats", **bearer("s3cret")).status_code,
        api.get("/queue/stats", **bearer("s3cret")).json(),
    ) == (
        403,
        NOT_ADMIN,
    )
    assert api.get("/queue/stats", **bearer("wrong")).json() == NOT_ADMIN
    assert api.get("/queue/stats", **bearer("adm1n")).status_code == 200
    assert api.get("/config", **bearer("s3cret")).status_code == 200
    assert api.get("/config", **bearer("adm1n")).status_code == 200
    assert api.get("/config", **bearer("wrong")).status_code == 403


def test_without_tokens_everything_is_open(api):
    assert api.get("/queue/stats").status_code == 200
    assert api.get("/metrics").status_code == 200
