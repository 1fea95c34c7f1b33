"""`GET /health`: 200 when PostgreSQL and Redis answer, 503 naming the one that does not (no auth)."""

from __future__ import annotations

import datetime

import redis
from django.db import connection
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .core.conf import current
from .core.coordination import redis_client

STARTED_AT = datetime.datetime.now(datetime.UTC)


def postgres_answers() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        return False


def redis_answers() -> bool:
    try:
        return bool(redis_client(current().services.redis_url).ping())
    except redis.RedisError:
        return False


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "unavailable"])
    instantiated_at = serializers.DateTimeField(required=False)
    detail = serializers.CharField(required=False, help_text="which of PostgreSQL and Redis does not answer")


class HealthView(APIView):
    authentication_classes = []
    permission_classes = []

    @extend_schema(responses={200: HealthSerializer, 503: HealthSerializer})
    def get(self, request):
        down = [name for name, ok in (("PostgreSQL", postgres_answers()), ("Redis", redis_answers())) if not ok]
        if down:
            return Response({"status": "unavailable", "detail": f"{' and '.join(down)} not answering"}, status=503)
        return Response({"status": "ok", "instantiated_at": STARTED_AT.isoformat()})
