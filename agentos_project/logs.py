"""Log formats: `text` (one readable line; ticket changes already read `key=value`) or `json` (one object per line,
with a ticket change's fields as top-level keys), chosen by AGENTOS_LOG_FORMAT.

Standard library only: serve's supervisor, which holds no Django, writes its own lines with `json_line` too.
"""

from __future__ import annotations

import datetime
import json
import logging


def json_line(*, created: float, level: str, logger: str, message: str, fields: dict | None = None) -> str:
    """One line of the json format: time (UTC, to the millisecond), level, logger, message, then `fields`."""
    line = {
        "time": datetime.datetime.fromtimestamp(created, datetime.UTC).isoformat(timespec="milliseconds"),
        "level": level,
        "logger": logger,
        "message": message,
        **(fields or {}),
    }
    return json.dumps(line, default=str)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = dict(getattr(record, "ticket", {}))
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        return json_line(
            created=record.created,
            level=record.levelname,
            logger=record.name,
            message=record.getMessage(),
            fields=fields,
        )


def access_lines_in(log_format: str) -> None:
    """Write uvicorn's access lines in `log_format`, when its access log is on. uvicorn gives the access logger its
    handler before it loads the application, and leaves it none with `--no-access-log` (as `serve` runs it), so
    this changes only the format of lines that are written anyway: a handler added here would turn them on."""
    if log_format == "json":
        for handler in logging.getLogger("uvicorn.access").handlers:
            handler.setFormatter(JsonFormatter())
