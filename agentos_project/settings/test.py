"""Tests: the machine's PostgreSQL and a Redis database index of their own unless the environment says otherwise."""

import os

os.environ.setdefault("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/agentos")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("AGENTOS_DEMO_AGENTS", "true")

from .base import *  # noqa: E402, F403
