"""Log formats: `text` (one readable line; ticket changes already read `key=value`) or `json` (one object per line,
with a ticket change's fields as top-level keys), chosen by AGENTOS_LOG_FORMAT."""

from __future__ import annotations

import datetime
import json
import logging


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "ticket", {}),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
