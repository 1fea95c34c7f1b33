"""What a process does once start-up has loaded it: the web's `agentos_project.asgi` and a worker at `worker_ready`
(`queueing.worker_signals`)."""

from __future__ import annotations

import gc


def freeze_loaded_objects(**_kwargs) -> None:
    """Everything loaded by start-up is kept for the process's life: `gc.freeze` takes it out of the collector's
    reach, so a full collection walks only what was made since. What is garbage already is collected first, not
    kept. Called in a worker at `worker_ready`, and by a web process once `agentos_project.asgi` has loaded."""
    gc.collect()
    gc.freeze()
