"""The `{"detail": ...}` bodies of refusals, described for `/openapi.json` (`exceptions` builds them; nothing here
runs): every app's views document their refusals with these."""

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
