"""Runnable examples of a user's components (docs/components.md)."""
