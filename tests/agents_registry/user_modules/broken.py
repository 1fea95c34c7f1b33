"""A user's module that fails to import."""

raise RuntimeError("no API key for the CRM")
