"""Production: the same as base, but demo agents are off unless AGENTOS_DEMO_AGENTS says otherwise."""

import os
import sys

from agentos_project.core.conf import ConfigError, load

from .base import *  # noqa: F403

DEMO_AGENTS_DEFAULT = False
DEBUG = False
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "bench"]  # noqa: F405
if "DJANGO_SECRET_KEY" not in os.environ:
    sys.stderr.write("agentos: configuration error: DJANGO_SECRET_KEY must be set in production\n")
    raise SystemExit(2)
try:
    AGENTOS = load(os.environ, demo_agents_default=DEMO_AGENTS_DEFAULT)
except ConfigError as error:  # pragma: no cover - base already validated the same environment
    sys.stderr.write(f"agentos: configuration error: {error}\n")
    raise SystemExit(2) from None
