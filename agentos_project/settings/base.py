"""Settings for development and `make serve`; production.py and test.py adjust them.

Every agentos knob comes from the environment through `agentos_project.core.conf.load`; a bad value stops
start-up with one line that names the variable.
"""

import os
import sys
from pathlib import Path

from agentos_project.core.conf import ConfigError, load
from agentos_project.core.postgres.url import database_settings

BASE_DIR = Path(__file__).resolve().parent.parent.parent
DEMO_AGENTS_DEFAULT = True

try:
    AGENTOS = load(os.environ, demo_agents_default=DEMO_AGENTS_DEFAULT)
except ConfigError as error:
    sys.stderr.write(f"agentos: configuration error: {error}\n")
    raise SystemExit(2) from None


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "agentos-development-key-not-for-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "false").lower() == "true"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "agentos_project",
    "queueing",
    "agents_registry",
    "runs",
    "bench",  # development only (the bench and demo commands); production.py leaves it out
]

# BodySizeLimitMiddleware is sync-only and innermost on purpose: under ASGI Django then runs the whole chain
# (and the sync views) on one thread, instead of hopping threads for every hook of every middleware.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "agentos_project.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",  # the Django admin's forms; DRF's views are exempt (bearer auth)
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "agentos_project.middleware.BodySizeLimitMiddleware",
]

ROOT_URLCONF = "agentos_project.urls"
ASGI_APPLICATION = "agentos_project.asgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": database_settings(
        AGENTOS.services.database_url,
        pool_size=AGENTOS.services.database_pool_size,
        prepare=AGENTOS.services.database_prepare,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
# The Django admin's CSS and scripts: `manage.py serve` (at start) and the Dockerfile (at build) collect them into
# STATIC_ROOT, a folder git ignores, gzipped beside; StaticFilesMiddleware serves them from there.
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

MAX_BODY_BYTES = 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_PARSER_CLASSES": [
        "agentos_project.core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "agentos_project.core.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["agentos_project.core.identity.auth.BearerAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": [
        "agentos_project.core.identity.auth.BearerPermission",
        "agentos_project.core.identity.scopes.ScopePermission",
    ],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "agentos_project.core.exceptions.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agentos",
    "DESCRIPTION": "Durable background runs for AI agents, wire-compatible with AgentOS.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["agentos_project.core.identity.auth.BearerPermission"],
    "ENUM_NAME_OVERRIDES": {"RunStatusEnum": "runs.models.RunStatus", "HealthStatusEnum": ["ok", "unavailable"]},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agentos_project.core.openapi.document_gates",
    ],
}

# Celery: the broker carries ticket ids only; PostgreSQL holds the truth, so results are not stored. Worker task
# events are off unless AGENTOS_TASK_EVENTS=true, for the worker CPU they cost per run; Flower turns them on by
# itself while it watches (`enable_events`). The publisher's task-sent events stay off, for the drain rate they cost
# (docs/benchmarks.md).
CELERY_BROKER_URL = AGENTOS.services.celery_broker_url
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_POOL = "queueing.celery_pool:ElasticTaskPool"  # Celery's threads pool, its idle threads ended
CELERY_WORKER_CONCURRENCY = AGENTOS.queue.max_concurrency or 512
CELERY_TASK_DEFAULT_QUEUE = "agentos"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None  # a worker waits out a broker outage instead of exiting
# With a Redis broker, kombu's ack emulation copies every delivered message into a hash and a sorted set and takes
# it out again on ack (two pipelines per message, costly in worker CPU: docs/benchmarks.md), to re-deliver it an
# hour later if its worker died. agentos needs neither: a delivered message stays in the worker's memory until acked
# and goes back to the queue at a warm shutdown (kombu's in-memory QoS), and one lost with a killed worker is re-sent
# by the sweeper once its marker expires (queueing.router), as for any lost message.
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5, "ack_emulation": False}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_SEND_TASK_EVENTS = AGENTOS.server.task_events
CELERY_TASK_SEND_SENT_EVENT = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "agentos_project.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": AGENTOS.server.log_format}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Celery's "Received task" and "Task … succeeded" lines, two per run: the ticket lines (agentos.tickets)
        # already tell each change, with the run and session ids.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        # uvicorn's own lines in this format too: uvicorn gives them handlers of its own before it loads the
        # application, which loads these settings. Not its parent logger "uvicorn": configuring it would make the
        # access logger, its child, propagate to it, and so turn on an access log `--no-access-log` had turned off.
        # Its access lines keep their handler and get this format in agentos_project.asgi (logs.access_lines_in).
        "uvicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
