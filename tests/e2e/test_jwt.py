"""JWT identity, scopes and isolation through a real `serve`, with Agno's own client sending each user's token as
AgentOS clients do (a header per call)."""

from __future__ import annotations

import time

import jwt
import pytest
import requests
from agno.client import AgentOSClient

pytestmark = pytest.mark.slow
SECRET = "a-string-secret-at-least-256-bits-long"
JWT = {"AGENTOS_JWT_VERIFICATION_KEYS": SECRET, "AGENTOS_JWT_ALGORITHM": "HS256", "AGENTOS_AUTHORIZATION": "true"}
HITL = "/agents/hitl-agent/runs"
PLAIN = {"stream": "false"}


def bearer(sub: str, *scopes: str) -> dict:
    claims = {"sub": sub, "scopes": list(scopes), "exp": int(time.time()) + 86400}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


ADA = bearer("ada", "agents:stub-agent:run", "agents:stub-agent:read", "agents:hitl-agent:run", "config:read")
GRACE = bearer("grace", "agents:run", "agents:read")
ADMIN = bearer("root", "agent_os:admin")


def test_agnos_client_runs_as_its_tokens_user_sees_what_it_may_and_nobody_elses_runs(start_serve, run):
    serve = start_serve(**JWT)
    client = AgentOSClient(base_url=serve.url)

    async def use():
        config = await client.aget_config(headers=ADA)
        inline = await client.run_agent("stub-agent", "hi sleep=0", session_id="jwt-1", headers=ADA)
        return config, inline

    config, inline = run(use())
    paused = requests.post(
        f"{serve.url}{HITL}",
        data={
            "message": "please delete scratch sleep=0",
            "session_id": "jwt-2",
            "background": "true",
            "stream": "false",
        },
        headers=ADA,
        timeout=30,
    ).json()
    run_id = paused["run_id"]
    poll = f"{serve.url}{HITL}/{run_id}?session_id=jwt-2"

    assert sorted(agent.id for agent in config.agents) == ["hitl-agent", "stub-agent"], "the two Ada's token names"
    assert (inline.content, inline.user_id) == ("echo: hi sleep=0 (history: 0 messages)", "ada")
    assert requests.get(poll, headers=GRACE, timeout=10).status_code == 404, "Grace cannot see Ada's run"
    assert requests.get(poll, headers=ADMIN, timeout=10).json()["run_id"] == run_id
    refused = requests.post(f"{serve.url}/teams/stub-team/runs", data={"message": "x"}, headers=ADA, timeout=10)
    assert (refused.status_code, refused.json()) == (
        403,
        {"detail": "Insufficient permissions. Required scope(s): teams:run"},
    )
    missing = requests.get(f"{serve.url}/config", timeout=10)
    assert (missing.status_code, missing.json()) == (401, {"detail": "Authorization header missing"})
    assert requests.get(f"{serve.url}/health", timeout=10).status_code == 200
