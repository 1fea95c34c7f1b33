"""`/openapi.json` says what clients look for (issue 41): one operationId per operation, the refusals each endpoint
gives with their `{"detail": ...}` body, streamed answers as server-sent events, the fields a request needs, and
descriptions written for clients."""

import re
from collections import Counter

import pytest

pytestmark = pytest.mark.django_db
KINDS = ("agents", "teams", "workflows")
ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
INVALID = {"application/json": {"schema": {"$ref": "#/components/schemas/ValidationError"}}}
# The operations whose input is validated (422): their body or query parameters.
VALIDATED = {
    *((f"/{kind}/{{component_id}}/runs", "post") for kind in KINDS),
    *((f"/{kind}/{{component_id}}/runs/{{run_id}}", "get") for kind in KINDS),
    *((f"/{kind}/{{component_id}}/runs/{{run_id}}/{action}", "post")
      for kind in KINDS for action in ("cancel", "continue", "resume")),
    ("/queue/jobs", "get"),
    ("/queue/jobs/{job_id}/requeue", "post"),
}  # fmt: skip


@pytest.fixture
def schema(api) -> dict:
    return api.get("/openapi.json").json()


def operations(schema: dict):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def test_every_operation_id_is_unique_and_the_queues_are_agentos(schema):
    ids = Counter(operation["operationId"] for _, _, operation in operations(schema))
    queue = {(path, method): op["operationId"] for path, method, op in operations(schema) if path.startswith("/queue")}

    assert [name for name, count in ids.items() if count > 1] == []
    assert [name for name in ids if re.search(r"_\d+$", name)] == [], "no collision left to drf-spectacular's suffixes"
    assert queue == {
        ("/queue/jobs", "get"): "list_queue_jobs",
        ("/queue/jobs/{job_id}", "get"): "get_queue_job",
        ("/queue/jobs/{job_id}/requeue", "post"): "requeue_queue_job",
        ("/queue/stats", "get"): "get_queue_stats",
    }


def test_descriptions_are_written_for_clients(schema):
    described = {(path, method): op.get("description") for path, method, op in operations(schema)}

    assert schema["components"]["schemas"]["Submit"]["description"] == (
        "A run to start: form fields (multipart or urlencoded) or a JSON body with the same keys."
    )
    assert schema["components"]["schemas"]["Job"]["description"] == "A job of the durable queue: one run's ticket."
    assert {key: text for key, text in described.items() if key[0].startswith(("/queue", "/metrics"))} == {
        ("/queue/jobs", "get"): "Jobs of the durable queue, newest first; status=failed is the dead-letter list.",
        ("/queue/jobs/{job_id}", "get"): "One job of the durable queue.",
        ("/queue/jobs/{job_id}/requeue", "post"): (
            "A failed or cancelled job back in line, with one more attempt, at the back of its session."
        ),
        ("/queue/stats", "get"): "Jobs by status and the oldest queued job's age.",
        ("/metrics", "get"): "Prometheus' text format.",
    }


def test_every_gated_endpoint_documents_its_refusals_with_their_detail(schema):
    for path, method, operation in operations(schema):
        responses = operation["responses"]
        if path == "/health":
            assert not {"401", "403"} & set(responses), "no bearer gate"
            continue
        for status in ("401", "403"):
            assert responses[status]["content"] == ERROR, (path, method, status)
        if (path, method) in VALIDATED:
            assert responses["422"]["content"] == INVALID, (path, method)
        else:
            assert "422" not in responses, (path, method)
        if path.startswith("/queue"):
            refusals = {status for status in responses if status not in ("200", "422")}
            assert {status: responses[status].get("content") for status in refusals} == dict.fromkeys(refusals, ERROR)


def test_streamed_answers_are_declared_as_server_sent_events(schema):
    for kind in KINDS:
        prefix = f"/{kind}/{{component_id}}/runs"
        for path, first in ((prefix, "RunStarted"), (f"{prefix}/{{run_id}}/continue", "RunContinued"),
                            (f"{prefix}/{{run_id}}/resume", "replay")):  # fmt: skip
            streamed = schema["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]
            assert streamed["schema"] == EVENT_STREAM, path
            [example] = streamed["examples"].values()
            assert example["value"].startswith(f"event: {first}\ndata: {{"), path


EVENT_STREAM = {
    "type": "string",
    "format": "event-stream",
    "description": (
        "Server-sent events: frames of `event: <name>` and `data: <JSON>`, the JSON carrying `event`, `run_id`, "
        "`session_id`, `created_at`, `event_index` and the event's own fields. The stream ends after the event "
        "that ends the run or its leg (completed, error, cancelled, paused); an idle stream gets `: keepalive` "
        "comments. A resume opens with a `catch_up`, `replay` or `error` frame."
    ),
}


@pytest.mark.parametrize("request_body", ["Continue", "Resume"])
def test_continue_and_resume_require_their_session_id(schema, request_body):
    component = schema["components"]["schemas"][request_body]

    assert "session_id" in component["required"]
    assert "nullable" not in component["properties"]["session_id"]
