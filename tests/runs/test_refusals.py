"""Every refusal of a submit (CONTRACT 3.1 and the inputs a fuzzer found): its status, its exact `detail`, and not
one row written. Each case is a request as a client would send it."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from agentos_project.core.conf import current

from .conftest import row_counts

pytestmark = pytest.mark.django_db
RUNS = "/agents/stub-agent/runs"
BASE = {"message": "hi sleep=0", "background": True, "stream": False}
FORM = {"message": "hi sleep=0", "background": "true", "stream": "false"}
DEEP = '{"a":' * 1000 + "1" + "}" * 1000


def as_json(api, body, path=RUNS, **headers):
    raw = body if isinstance(body, str) else json.dumps(body)
    return api.generic("POST", path, raw.encode("utf-8", "surrogatepass"), "application/json", **headers)


def as_form(api, fields, path=RUNS, **headers):
    return api.post(path, fields, format="multipart", **headers)


def field(loc: str, kind: str, msg: str, input_=None, *, location: str = "body"):
    """A 422 whose detail is exactly one field error."""
    return 422, [{"type": kind, "loc": [location, loc], "msg": msg, "input": input_}]


def json_invalid(msg: str):
    return 422, [{"type": "json_invalid", "loc": ["body"], "msg": msg, "input": None}]


def detail(status: int, text: str):
    return status, text


NUL = "Value must not contain NUL characters"
SURROGATE = "Value must not contain unpaired surrogates"
INFINITE = "Value must not contain infinite or NaN numbers"
NOT_OBJECT = "Value is not a valid JSON object"
NOT_BOOLEAN = "Must be a valid boolean."

CASES = {
    # CONTRACT 3.1
    "unknown agent": (lambda api: as_form(api, FORM, "/agents/nobody/runs"), detail(404, "Agent not found")),
    "unknown team": (lambda api: as_form(api, FORM, "/teams/nobody/runs"), detail(404, "Team not found")),
    "unknown workflow": (lambda api: as_form(api, FORM, "/workflows/x/runs"), detail(404, "Workflow not found")),
    "missing message": (
        lambda api: as_form(api, {"background": "true"}),
        field("message", "missing", "This field is required."),
    ),
    "blank message": (
        lambda api: as_form(api, {**FORM, "message": "   "}),
        field("message", "invalid", "Field must not be blank", "   "),
    ),
    "empty message": (
        lambda api: as_json(api, {**BASE, "message": ""}),
        field("message", "blank", "This field may not be blank.", ""),
    ),
    "message not a string": (
        lambda api: as_json(api, {**BASE, "message": {"a": 1}}),
        field("message", "invalid", "Not a valid string.", {"a": 1}),
    ),
    "non-boolean background": (
        lambda api: as_form(api, {**FORM, "background": "maybe"}),
        field("background", "invalid", NOT_BOOLEAN, "maybe"),
    ),
    "non-boolean stream": (
        lambda api: as_json(api, {**BASE, "stream": "perhaps"}),
        field("stream", "invalid", NOT_BOOLEAN, "perhaps"),
    ),
    "session_state not JSON": (
        lambda api: as_form(api, {**FORM, "session_state": "{not json"}),
        field("session_state", "invalid", NOT_OBJECT, "{not json"),
    ),
    "session_state a list": (
        lambda api: as_json(api, {**BASE, "session_state": [1, 2]}),
        field("session_state", "invalid", NOT_OBJECT, [1, 2]),
    ),
    "metadata not JSON": (
        lambda api: as_form(api, {**FORM, "metadata": "nope"}),
        field("metadata", "invalid", NOT_OBJECT, "nope"),
    ),
    # CONTRACT 17
    "expires_in zero": (
        lambda api: as_form(api, {**FORM, "expires_in": "0"}),
        field("expires_in", "range", "Value must be above 0 and at most 31622400 seconds", "0"),
    ),
    "expires_in negative": (
        lambda api: as_json(api, {**BASE, "expires_in": -5}),
        field("expires_in", "range", "Value must be above 0 and at most 31622400 seconds", -5),
    ),
    "expires_in beyond a year": (
        lambda api: as_json(api, {**BASE, "expires_in": 1e12}),
        field("expires_in", "range", "Value must be above 0 and at most 31622400 seconds", 1e12),
    ),
    "expires_in of 400 digits": (
        lambda api: as_json(api, {**BASE, "expires_in": 10**400}),
        field("expires_in", "invalid", "Value is not a valid number of seconds", 10**400),
    ),
    "expires_in not a number": (
        lambda api: as_form(api, {**FORM, "expires_in": "soon"}),
        field("expires_in", "invalid", "Value is not a valid number of seconds", "soon"),
    ),
    "expires_in NaN": (
        lambda api: as_form(api, {**FORM, "expires_in": "nan"}),
        field("expires_in", "invalid", "Value is not a valid number of seconds", "nan"),
    ),
    "expires_in a boolean": (
        lambda api: as_json(api, {**BASE, "expires_in": True}),
        field("expires_in", "invalid", "Value is not a valid number of seconds", True),
    ),
    "malformed JSON body": (
        lambda api: as_json(api, '{"message": "hi",'),
        json_invalid(
            "JSON parse error - Expecting property name enclosed in double quotes: line 1 column 18 (char 17)"
        ),
    ),
    "NaN in the body": (
        lambda api: as_json(api, '{"message": "hi", "metadata": {"a": NaN}}'),
        json_invalid("JSON parse error - Out of range float values are not JSON compliant: 'NaN'"),
    ),
    "Idempotency-Key over 512": (
        lambda api: as_form(api, FORM, HTTP_IDEMPOTENCY_KEY="k" * 513),
        detail(422, "Idempotency-Key must be at most 512 characters"),
    ),
    "Idempotency-Key with NUL": (
        lambda api: as_form(api, FORM, HTTP_IDEMPOTENCY_KEY="k\x00"),
        detail(422, "Idempotency-Key must not contain NUL characters"),
    ),
    "body over 1 MiB": (
        lambda api: as_json(api, {**BASE, "message": "x" * (1024 * 1024 + 1)}),
        detail(413, "Request body exceeds the 1 MiB limit"),
    ),
    # What PostgreSQL's jsonb refuses, in JSON bodies and in form fields
    "NUL in session_state": (
        lambda api: as_json(api, {**BASE, "session_state": {"a": "x\x00y"}}),
        field("session_state", "invalid", NUL, {"a": "x\ufffdy"}),
    ),
    "NUL in a metadata key": (
        lambda api: as_json(api, {**BASE, "metadata": {"a\x00": 1}}),
        field("metadata", "invalid", NUL, {"a\ufffd": 1}),
    ),
    "NUL in a form session_state": (
        lambda api: as_form(api, {**FORM, "session_state": '{"a": "\\u0000"}'}),
        field("session_state", "invalid", NUL, '{"a": "\\u0000"}'),
    ),
    "surrogate in session_state": (
        lambda api: as_json(api, '{"message": "hi", "background": true, "session_state": {"a": "\\ud800"}}'),
        field("session_state", "invalid", SURROGATE, {"a": "\ufffd"}),
    ),
    "surrogate in a form metadata": (
        lambda api: as_form(api, {**FORM, "metadata": '{"a": ["\\udfff"]}'}),
        field("metadata", "invalid", SURROGATE, '{"a": ["\\udfff"]}'),
    ),
    "1e400 in metadata": (
        lambda api: as_json(api, '{"message": "hi", "background": true, "metadata": {"a": 1e400}}'),
        field("metadata", "invalid", INFINITE, {"a": None}),
    ),
    "1e400 in a form session_state": (
        lambda api: as_form(api, {**FORM, "session_state": '{"a": [-1e400]}'}),
        field("session_state", "invalid", INFINITE, '{"a": [-1e400]}'),
    ),
    # Strings PostgreSQL refuses
    "surrogate in message": (
        lambda api: as_json(api, '{"message": "hi \\ud800", "background": true}'),
        field(
            "message", "surrogate_characters_not_allowed", "Surrogate characters are not allowed: U+D800.", "hi \ufffd"
        ),
    ),
    "surrogate in session_id": (
        lambda api: as_json(api, '{"message": "hi", "session_id": "\\udbff", "background": true}'),
        field(
            "session_id", "surrogate_characters_not_allowed", "Surrogate characters are not allowed: U+DBFF.", "\ufffd"
        ),
    ),
    "surrogate in user_id": (
        lambda api: as_json(api, '{"message": "hi", "user_id": "a\\udc00", "background": true}'),
        field(
            "user_id", "surrogate_characters_not_allowed", "Surrogate characters are not allowed: U+DC00.", "a\ufffd"
        ),
    ),
    "NUL in message": (
        lambda api: as_json(api, {**BASE, "message": "hi\x00"}),
        field("message", "null_characters_not_allowed", "Null characters are not allowed.", "hi\ufffd"),
    ),
    # JSON nested deeper than Python (or jsonb) goes
    "deep JSON body": (
        lambda api: as_json(api, '{"message": "hi", "metadata": ' + DEEP + "}"),
        json_invalid("JSON parse error - nested too deeply"),
    ),
    "deep JSON in a form field": (
        lambda api: as_form(api, {**FORM, "metadata": DEEP}),
        field("metadata", "invalid", NOT_OBJECT, DEEP),
    ),
    "JSON deeper than 200 levels": (
        lambda api: as_json(api, {**BASE, "session_state": json.loads('{"a":' * 201 + "1" + "}" * 201)}),
        field("session_state", "invalid", "Value must not be nested deeper than 200 levels"),
    ),
    # Form oddities
    "message sent as a file": (
        lambda api: as_form(api, {**FORM, "message": SimpleUploadedFile("m.bin", b"\xff\xfe\x00")}),
        field("message", "invalid", "Not a valid string.", "m.bin"),
    ),
    "empty form background": (
        lambda api: as_form(api, {**FORM, "background": ""}),
        field("background", "invalid", NOT_BOOLEAN, ""),
    ),
    "empty form stream": (
        lambda api: as_form(api, {**FORM, "stream": ""}),
        field("stream", "invalid", NOT_BOOLEAN, ""),
    ),
    "too many fields": (
        lambda api: api.post(
            RUNS,
            "&".join([*(f"k{i}=v" for i in range(1001)), "message=hi"]),
            content_type="application/x-www-form-urlencoded",
        ),
        detail(400, "Too many fields in the request (at most 1000)"),
    ),  # fmt: skip
    "unrouted path": (lambda api: as_form(api, FORM, "/agents/stub-agent/run"), detail(404, "Not Found")),
    "unrouted GET": (lambda api: api.get("/nowhere/at/all"), detail(404, "Not Found")),
    "wrong method": (lambda api: api.put(RUNS, FORM), detail(405, 'Method "PUT" not allowed.')),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refused_submit_answers_its_status_and_detail_and_writes_nothing(api, case):
    send, (status, expected) = CASES[case]
    before = row_counts()

    response = send(api)

    assert response["Content-Type"] == "application/json"
    assert (response.status_code, response.json()["detail"]) == (status, expected)
    assert row_counts() == before


def test_a_component_without_a_store_refuses_background_runs(api, storeless_agent):
    before = row_counts()

    response = as_form(api, FORM, "/agents/storeless-agent/runs")

    assert (response.status_code, response.json()) == (
        400,
        {"detail": "Background execution requires a database to be configured on the agent"},
    )
    assert row_counts() == before


def test_a_full_queue_answers_429(api):
    with override_settings(AGENTOS=current().replace("queue", max_queue_depth=1)):
        assert as_form(api, FORM).status_code == 202
        before = row_counts()
        response = as_form(api, FORM)

    assert (response.status_code, response.json()) == (429, {"detail": "Job queue is full"})
    assert row_counts() == before


def multipart(boundary: str, fields: dict) -> bytes:
    """A multipart body of `fields`, framed by `boundary`."""
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    return ("".join(parts) + f"--{boundary}--\r\n").encode()


FRAMED = multipart("BBB", {**FORM, "session_id": "mp-1"})


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_db")
@pytest.mark.parametrize(
    ("content_type", "body", "msg"),
    [
        ("multipart/form-data; boundary=AAA", FRAMED, "Multipart body is not framed by the boundary it declares"),
        ("multipart/form-data", FRAMED, "Multipart body has no boundary in its Content-Type"),
        ("multipart/form-data; boundary=", FRAMED, "Multipart body has no boundary in its Content-Type"),
        ("multipart/form-data; boundary=BBB", FRAMED[:-30], "Multipart body ends before its closing boundary"),
        ("multipart/form-data; boundary=BBB", FRAMED[:-9], "Multipart body ends before its closing boundary"),
    ],
    ids=["boundary mismatch", "no boundary", "empty boundary", "truncated in a field", "truncated at the end"],
)
def test_a_multipart_body_its_boundary_does_not_frame_is_422_and_writes_nothing(api, content_type, body, msg):
    before = row_counts()

    response = api.generic("POST", RUNS, body, content_type=content_type)

    assert (response.status_code, response.json()) == (
        422,
        {"detail": [{"type": "multipart_invalid", "loc": ["body"], "msg": msg, "input": None}]},
    )
    assert row_counts() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_db")
def test_a_multipart_body_framed_by_its_boundary_is_accepted_with_a_preamble_and_an_epilogue(api):
    body = b"a preamble\r\n" + FRAMED + b"an epilogue\r\n"

    response = api.generic("POST", RUNS, body, content_type="multipart/form-data; boundary=BBB")

    assert (response.status_code, response.json()["session_id"]) == (202, "mp-1")
