"""Input validation for the runs API. Failures become 422 with FastAPI's field-error list (CONTRACT 3.1).

Everything accepted here can be stored: strings without NUL or unpaired surrogates (DRF's CharField refuses
both), JSON objects nested at most `jsonsafe.MAX_DEPTH` levels with finite numbers only (see
`agentos_project.core.jsonsafe`).
"""

from __future__ import annotations

import json
import math

from django.core.files.uploadedfile import UploadedFile
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.utils import html

from agentos_project.core import jsonsafe
from agentos_project.core.conf import MAX_TTL_SECONDS
from agentos_project.core.units import seconds_text
from agentos_project.core.validation import ReusedFields
from agentos_project.core.validation import validated as validate_request


class StrictBooleanField(serializers.BooleanField):
    """`true`/`false` (and DRF's other spellings). An empty form value is invalid rather than "not sent", and a
    form that omits the field gets the field's default (DRF would read an omitted form boolean as false)."""

    default_empty_html = empty

    def get_value(self, dictionary):
        if html.is_html_input(dictionary) and dictionary.get(self.field_name) == "":
            return ""
        return super().get_value(dictionary)


class _JSONField(serializers.Field):
    """A JSON value of type `expected`, sent as a JSON string (form fields) or as itself (JSON bodies), storable
    as `agentos_project.core.jsonsafe` checks it."""

    expected: type

    def to_internal_value(self, data):
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except (ValueError, RecursionError):
                self.fail("invalid")
        if not isinstance(data, self.expected):
            self.fail("invalid")
        reason = jsonsafe.problem(data)
        if reason:
            raise serializers.ValidationError(f"Value {reason}", code="invalid")
        return data

    def to_representation(self, value):
        return value


@extend_schema_field(OpenApiTypes.OBJECT)
class JSONObjectField(_JSONField):
    """A JSON object; a blank form value or a JSON `null` is None."""

    expected = dict
    default_error_messages = {"invalid": "Value is not a valid JSON object"}

    def to_internal_value(self, data):
        if isinstance(data, str) and not data.strip():
            return None
        if isinstance(data, str) and data.strip() == "null":  # a form's JSON `null`, as a JSON body's null
            return None
        return super().to_internal_value(data)


@extend_schema_field({"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": MAX_TTL_SECONDS})
class DeadlineField(serializers.Field):
    """Seconds a queued run may wait for its start (`expires_in`, CONTRACT 17): a number above 0, at most a year;
    a blank form value or a JSON `null` is None (the default deadline, if any)."""

    default_error_messages = {
        "invalid": "Value is not a valid number of seconds",
        "range": f"Value must be above 0 and at most {seconds_text(MAX_TTL_SECONDS)} seconds",
    }

    def to_internal_value(self, data):
        if data is None or (isinstance(data, str) and not data.strip()):
            return None
        if isinstance(data, bool) or not isinstance(data, (int, float, str)):
            self.fail("invalid")
        try:
            seconds = float(data)
        except (ValueError, OverflowError):  # a JSON integer of 400 digits is an int float() cannot hold
            self.fail("invalid")
        if not math.isfinite(seconds):
            self.fail("invalid")
        if not 0 < seconds <= MAX_TTL_SECONDS:
            self.fail("range")
        return seconds

    def to_representation(self, value):
        return value


class SubmitSerializer(ReusedFields, serializers.Serializer):
    """A run to start: form fields (multipart or urlencoded) or a JSON body with the same keys."""

    # The docstring above is the request's description in /openapi.json (else it would be ReusedFields').
    message = serializers.CharField(trim_whitespace=False, min_length=1)
    session_id = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=255)
    user_id = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=255)
    stream = StrictBooleanField(required=False, default=True)
    background = StrictBooleanField(required=False, default=False)
    session_state = JSONObjectField(required=False, allow_null=True, default=None)
    metadata = JSONObjectField(required=False, allow_null=True, default=None)
    expires_in = DeadlineField(required=False, allow_null=True, default=None)

    def validate_message(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Field must not be blank")
        return value


class PollQuerySerializer(serializers.Serializer):
    session_id = serializers.CharField(max_length=255)


@extend_schema_field({"type": "array", "items": {"type": "object", "additionalProperties": True}})
class JSONListField(_JSONField):
    expected = list
    default_error_messages = {"invalid": "Value is not a valid JSON list"}


# Continue and resume find the run in its session: the views refuse a request without one (or a blank one) before
# these serializers read it.
SESSION_REQUIRED = "the run's session; without it: 400 `session_id is required for this action`"


class ContinueSerializer(serializers.Serializer):
    # The answers, in the shape of the client's kind (agentos takes each on every kind): one of them is required,
    # but checked after the run (404, 409s first).
    tools = JSONListField(required=False, default=None, help_text="tool executions with `confirmed` (agents)")
    requirements = JSONListField(required=False, default=None, help_text="requirements, confirmed (teams)")
    step_requirements = JSONListField(
        required=False, default=None, help_text="step requirements, their executor requirements confirmed (workflows)"
    )
    session_id = serializers.CharField(max_length=255, help_text=SESSION_REQUIRED)
    user_id = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=255)
    stream = StrictBooleanField(required=False, default=True)
    background = StrictBooleanField(required=False, default=False)


class CancelSerializer(serializers.Serializer):
    session_id = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=255)


class ResumeSerializer(serializers.Serializer):
    last_event_index = serializers.IntegerField(required=False, allow_null=True, min_value=-1, default=None)
    session_id = serializers.CharField(max_length=255, help_text=SESSION_REQUIRED)


def validated(serializer_class, data, *, location: str) -> dict:
    """Validate `data` or raise 422 listing each bad field as FastAPI would (`loc`, `msg`, `type`, `input`)."""
    return validate_request(serializer_class, data, location=location, echo=_echo)


def _echo(raw):
    """The refused input as it can be shown back: a file by its name, too deep a value not at all, unencodable
    characters replaced."""
    if isinstance(raw, UploadedFile):
        return raw.name
    if jsonsafe.too_deep(raw):
        return None
    return jsonsafe.storable(raw)
