"""Settings of agentos changed for a test (`with_conf`)."""

from __future__ import annotations

from django.test import override_settings

from agentos_project.core.conf import current


def with_conf(section: str, **changes):
    """Override some agentos settings of one section (a context manager or decorator)."""
    return override_settings(AGENTOS=current().replace(section, **changes))
