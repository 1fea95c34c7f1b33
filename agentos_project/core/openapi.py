"""The `{"detail": ...}` bodies of refusals, described for `/openapi.json` (`exceptions` builds them): every app's
views document their refusals with these, and `document_gates` adds the bearer gates' (`auth`, `scopes`) to every
operation behind them."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


FIELD_ERROR = {
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "loc": {"type": "array", "items": {"type": "string"}},
        "msg": {"type": "string"},
        "input": {"nullable": True},
    },
    "required": ["type", "loc", "msg", "input"],
}


@extend_schema_field(
    {
        "oneOf": [
            {"type": "array", "items": FIELD_ERROR},
            {"type": "string", "description": "an Idempotency-Key refusal"},
        ]
    }
)
class FieldErrorsField(serializers.JSONField):
    pass


class ValidationErrorSerializer(serializers.Serializer):
    """FastAPI's list of field errors; or, for an Idempotency-Key refusal (CONTRACT 7, 14), its text."""

    detail = FieldErrorsField()


def refused(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


INVALID = OpenApiResponse(ValidationErrorSerializer, description="a field or parameter is missing or malformed")


ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
GATES = {
    "401": "no bearer token, or a JWT that does not verify, while AGENTOS_SECURITY_KEY or JWT is on",
    "403": "a token that is not the key, a scope the token lacks, or a user_id or session_id that is not the token's",
}


def document_gates(result, generator, request, public):
    """A drf-spectacular postprocessing hook: each operation behind the bearer gates (one with a `security`
    requirement: all but /health) documents their 401 and 403, with the `{"detail": ...}` body, unless it states
    its own. The gates apply to every view by default (REST_FRAMEWORK's permission classes), so their refusals are
    documented the same way, not view by view."""
    for methods in result["paths"].values():
        for operation in methods.values():
            if operation.get("security"):
                for status, description in GATES.items():
                    operation["responses"].setdefault(status, {"description": description, "content": ERROR})
    return result
