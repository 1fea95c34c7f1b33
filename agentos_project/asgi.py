"""The ASGI application: Django behind a body limit that holds for every path and every kind of body."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from .bodylimit import BodyLimit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos_project.settings.base")

application = BodyLimit(get_asgi_application(), limit=settings.MAX_BODY_BYTES)
