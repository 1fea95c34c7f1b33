"""Each user's runs private to that user under JWT (issue 31): another user's run answers as an unknown one does on
every endpoint (poll, continue, cancel, resume), so ids cannot be probed; an admin-scoped token sees every run."""

from __future__ import annotations

import json
import time

import jwt
import pytest

from queueing.worker import worker_execute
from runs.models import Run
from tests.support.conf import with_conf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_db")]
SECRET = "a-string-secret-at-least-256-bits-long"
HITL = "/agents/hitl-agent/runs"
UNKNOWN = "00000000-0000-0000-0000-000000000000"


def bearer(sub: str, **claims) -> dict:
    claims = {"sub": sub, "exp": int(time.time()) + 86400, **claims}
    return {"HTTP_AUTHORIZATION": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


ADA, GRACE, ADMIN = bearer("ada"), bearer("grace"), bearer("root", scopes=["agent_os:admin"])


@pytest.fixture
def adas_paused_run(api):
    """A run of Ada's, paused on a tool call for her to confirm."""
    with with_conf("security", jwt_verification_keys=(SECRET,), jwt_algorithm="HS256"):
        form = {
            "message": "please delete scratch sleep=0",
            "session_id": "ada-1",
            "stream": "false",
            "background": "true",
        }
        answer = api.post(HITL, form, **ADA)
    assert answer.status_code == 202, answer.content
    run_id = answer.json()["run_id"]
    assert worker_execute(ticket_id=run_id) is True
    assert Run.objects.get(pk=run_id).status == "PAUSED"
    return run_id


def resume(api, run_id: str) -> bytes:
    """Grace's resume of `run_id`: the whole stream it answers."""
    response = api.post(f"{HITL}/{run_id}/resume", {"session_id": "ada-1"}, format="multipart", **GRACE)
    assert response.status_code == 200, response.json()
    return b"".join(response)  # Django consumes the SSE stream to its end


def confirmed(run_id: str) -> str:
    return json.dumps([{**tool, "confirmed": True} for tool in Run.objects.get(pk=run_id).tools])


@with_conf("security", jwt_verification_keys=(SECRET,), jwt_algorithm="HS256")
def test_another_users_run_is_unknown_on_every_endpoint(api, adas_paused_run):
    run_id, before = adas_paused_run, Run.objects.filter(pk=adas_paused_run).values().get()
    for probed in (run_id, UNKNOWN):
        poll = api.get(f"{HITL}/{probed}", {"session_id": "ada-1"}, **GRACE)
        assert (poll.status_code, poll.json()) == (404, {"detail": "Run not found"})
        continued = api.post(
            f"{HITL}/{probed}/continue",
            {"tools": confirmed(run_id), "session_id": "ada-1", "background": "true", "stream": "false"},
            **GRACE,
        )
        assert (continued.status_code, continued.json()) == (404, {"detail": "Run not found"})
        cancel = api.post(f"{HITL}/{probed}/cancel?session_id=ada-1", **GRACE)
        assert (cancel.status_code, cancel.json()) == (200, {})
    resumed = [resume(api, probed) for probed in (run_id, UNKNOWN)]
    assert resumed[0].replace(run_id.encode(), UNKNOWN.encode()) == resumed[1]
    assert Run.objects.filter(pk=run_id).values().get() == before, "nothing Grace sent changed Ada's run"


@with_conf("security", jwt_verification_keys=(SECRET,), jwt_algorithm="HS256")
def test_the_owner_and_an_admin_see_the_run_and_the_owner_continues_it(api, adas_paused_run):
    run_id = adas_paused_run

    assert api.get(f"{HITL}/{run_id}", {"session_id": "ada-1"}, **ADA).json()["status"] == "PAUSED"
    assert api.get(f"{HITL}/{run_id}", {"session_id": "ada-1"}, **ADMIN).json()["status"] == "PAUSED"
    continued = api.post(
        f"{HITL}/{run_id}/continue",
        {"tools": confirmed(run_id), "session_id": "ada-1", "background": "true", "stream": "false"},
        **ADA,
    )
    assert continued.status_code == 202
    assert Run.objects.get(pk=run_id).status == "PENDING"
