"""/config, component listings, /health, /openapi.json and the security key (CONTRACT 3.6, 3.8, 2)."""

import pytest

from tests.support.conf import with_conf

pytestmark = pytest.mark.django_db
SUMMARY_KEYS = {"id", "name", "description", "db_id", "model"}


def test_config_has_the_shape_agentos_clients_parse(api):
    body = api.get("/config").json()

    assert set(body) == {
        "os_id",
        "name",
        "description",
        "databases",
        "agents",
        "teams",
        "workflows",
        "interfaces",
        "queue",
    }
    assert isinstance(body["os_id"], str) and body["databases"] == ["agentos-db"] and body["interfaces"] == []
    assert [a["id"] for a in body["agents"]] == ["hitl-agent", "other-agent", "stub-agent"]
    assert [t["id"] for t in body["teams"]] == ["stub-team"]
    assert [w["id"] for w in body["workflows"]] == ["stub-workflow"]
    for summary in body["agents"] + body["teams"] + body["workflows"]:
        assert set(summary) == SUMMARY_KEYS
        assert summary["model"] == {"id": "stub-model", "provider": "agentos-stub"}
    assert body["queue"] == {"durable": True, "queue_per_session": True}


@pytest.mark.parametrize(
    ("changes", "queue"),
    [
        ({"per_session": False}, {"durable": True, "queue_per_session": False}),
        ({"durable": False}, {"durable": False, "queue_per_session": False}),
    ],
)
def test_config_reports_the_effective_queue(api, changes, queue):
    with with_conf("queue", **changes):
        assert api.get("/config").json()["queue"] == queue


@pytest.mark.parametrize(("path", "ids"), [("/agents", 3), ("/teams", 1), ("/workflows", 1)])
def test_listings(api, path, ids):
    body = api.get(path).json()

    assert len(body) == ids and all(set(s) == SUMMARY_KEYS for s in body)


def test_component_detail_and_404(api):
    assert api.get("/agents/stub-agent").json()["name"] == "Stub Agent"
    assert api.get("/teams/stub-team").json()["id"] == "stub-team"
    response = api.get("/agents/missing")
    assert (response.status_code, response.json()) == (404, {"detail": "Agent not found"})


def test_health_answers_when_postgres_and_redis_do(api):
    response = api.get("/health")

    assert (response.status_code, response.json()["status"]) == (200, "ok")


def test_health_names_redis_when_it_does_not_answer(api):
    with with_conf("services", redis_url="redis://127.0.0.1:1/0"):
        response = api.get("/health")

    assert response.status_code == 503
    assert response.json()["detail"] == "Redis not answering"


def test_openapi_lists_every_endpoint(api):
    schema = api.get("/openapi.json").json()

    assert schema["openapi"].startswith("3.")
    for path in (
        "/agents/{component_id}/runs",
        "/agents/{component_id}/runs/{run_id}",
        "/teams/{component_id}/runs",
        "/workflows/{component_id}/runs/{run_id}",
        "/config",
        "/health",
        "/agents",
    ):
        assert path in schema["paths"], path


def test_openapi_describes_the_bodies_clients_send_and_receive(api):
    schema = api.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    submit = schema["paths"]["/agents/{component_id}/runs"]["post"]
    poll = schema["paths"]["/agents/{component_id}/runs/{run_id}"]["get"]

    request = components["Submit"]
    assert set(submit["requestBody"]["content"]) == {
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    }
    assert request["required"] == ["message"]
    assert (request["properties"]["session_state"]["type"], request["properties"]["metadata"]["type"]) == (
        "object",
        "object",
    )
    assert request["properties"]["stream"] == {"type": "boolean", "default": True}
    assert {"202", "200", "404", "409", "413", "422", "429"} <= set(submit["responses"])
    assert components["Accepted"]["required"] == ["run_id", "session_id", "status"]
    assert set(poll["responses"]) == {"200", "401", "403", "404", "422"}
    assert set(components["Run"]["required"]) == {
        "run_id", "session_id", "status", "created_at", "input", "queue_attempt"
    }  # fmt: skip
    assert [kind["type"] for kind in components["ValidationError"]["properties"]["detail"]["oneOf"]] == [
        "array",
        "string",
    ]
    listing = schema["paths"]["/agents"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert listing["type"] == "array"
    assert schema["components"]["securitySchemes"]["securityKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "AGENTOS_SECURITY_KEY, when one is set; AGENTOS_ADMIN_TOKEN for /queue when one is set",
    }
