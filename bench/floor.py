"""The floor: the cheapest Django accept there is, to hold agentos' accept against (docs/benchmarks.md).

A one-file Django project whose only view (DRF) inserts one row in one transaction and answers 202, served by one
uvicorn process with Django's own psycopg 3 pool. It answers the path and form fields agentos' submit takes, so
the benchmark's client drives both the same way. It runs in a virtualenv of its own (`FloorServer` makes it),
because Django picks psycopg 3 over psycopg2 wherever both are installed, and agentos uses psycopg2.

    DATABASE_URL=postgresql://… uvicorn bench.floor:application
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit

import django
from django.conf import settings

url = urlsplit(os.environ["DATABASE_URL"])
settings.configure(
    DEBUG=False,
    SECRET_KEY="floor",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=["rest_framework"],
    MIDDLEWARE=[],
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": url.path.lstrip("/"),
            "USER": url.username or "postgres",
            "PASSWORD": url.password or "",
            "HOST": url.hostname,
            "PORT": url.port or 5432,
            "OPTIONS": {"pool": {"min_size": 4, "max_size": 16}},
        }
    },
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": [],
        "DEFAULT_PERMISSION_CLASSES": [],
        "UNAUTHENTICATED_USER": None,
    },
    USE_TZ=True,
)
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

with connection.cursor() as cursor:
    cursor.execute(
        "CREATE TABLE IF NOT EXISTS bench_floor (id uuid PRIMARY KEY, session_id text NOT NULL, "
        "message text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
    )
connection.close()


class Accept(APIView):
    def post(self, request, agent_id):
        run_id = uuid.uuid4()
        session_id = request.data.get("session_id") or str(uuid.uuid4())
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO bench_floor (id, session_id, message) VALUES (%s, %s, %s)",
                [run_id, session_id, request.data.get("message", "")],
            )
        return Response({"run_id": str(run_id), "session_id": session_id, "status": "PENDING"}, status=202)


urlpatterns = [path("agents/<str:agent_id>/runs", Accept.as_view())]
application = get_asgi_application()
