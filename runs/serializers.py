"""Input validation for the runs API. Failures become 422 with FastAPI's field-error list (CONTRACT 3.1)."""

from __future__ import annotations

import json

from rest_framework import serializers

from agentos_project.exceptions import RequestInvalid


class JSONObjectField(serializers.Field):
    """A JSON object, sent as a JSON string (form fields) or as an object (JSON bodies)."""

    default_error_messages = {"invalid": "Value is not a valid JSON object"}

    def to_internal_value(self, data):
        if isinstance(data, str):
            if not data.strip():
                return None
            try:
                data = json.loads(data)
            except json.JSONDecodeError:
                self.fail("invalid")
        if not isinstance(data, dict):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class SubmitSerializer(serializers.Serializer):
    message = serializers.CharField(trim_whitespace=False)
    session_id = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=255)
    user_id = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=255)
    stream = serializers.BooleanField(required=False, default=True)
    background = serializers.BooleanField(required=False, default=False)
    session_state = JSONObjectField(required=False, allow_null=True, default=None)
    metadata = JSONObjectField(required=False, allow_null=True, default=None)

    def validate_message(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Field must not be blank")
        return value


class PollQuerySerializer(serializers.Serializer):
    session_id = serializers.CharField(max_length=255)


def validated(serializer_class, data, *, location: str) -> dict:
    """Validate `data` or raise 422 listing each bad field as FastAPI would (`loc`, `msg`, `type`, `input`)."""
    serializer = serializer_class(data=data)
    if serializer.is_valid():
        return serializer.validated_data
    errors = []
    for name, messages in serializer.errors.items():
        for message in messages:
            kind = "missing" if message.code == "required" else message.code
            raw = data.get(name) if hasattr(data, "get") else None
            errors.append({"type": kind, "loc": [location, name], "msg": str(message), "input": raw})
    raise RequestInvalid(errors)
