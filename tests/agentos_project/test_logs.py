"""AGENTOS_LOG_FORMAT=json: one JSON object per line, a ticket change's fields at its top level."""

import io
import json
import logging

import pytest

from agentos_project.core.conf import ConfigError, load
from agentos_project.logs import JsonFormatter, access_lines_in


def test_a_ticket_change_is_one_json_object_with_its_fields():
    record = logging.LogRecord(
        "agentos.tickets", logging.INFO, __file__, 1, "ticket.%s run_id=%s", ("claim", "r"), None
    )
    record.ticket = {
        "event": "claim",
        "run_id": "r",
        "session_id": "s",
        "status": "running",
        "attempt": 1,
        "worker": "w",
    }

    line = json.loads(JsonFormatter().format(record))

    assert {key: line[key] for key in ("level", "logger", "message", "event", "run_id", "status", "attempt")} == {
        "level": "INFO",
        "logger": "agentos.tickets",
        "message": "ticket.claim run_id=r",
        "event": "claim",
        "run_id": "r",
        "status": "running",
        "attempt": 1,
    }
    assert line["time"].endswith("+00:00")


def test_the_format_is_a_setting_with_two_values():
    assert load({}).server.log_format == "text"
    assert load({"AGENTOS_LOG_FORMAT": "JSON"}).server.log_format == "json"
    with pytest.raises(ConfigError, match="^AGENTOS_LOG_FORMAT must be one of text, json \\(got 'xml'\\)$"):
        load({"AGENTOS_LOG_FORMAT": "xml"})


@pytest.fixture
def access_logger():
    logger = logging.getLogger("uvicorn.access")
    before = list(logger.handlers)
    yield logger
    logger.handlers = before


def test_uvicorns_access_lines_are_json_when_its_access_log_is_on_and_stay_off_when_it_is_off(access_logger):
    stream = io.StringIO()
    access_logger.handlers = [logging.StreamHandler(stream)]  # what uvicorn's access log installs
    access_lines_in("json")
    access_logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/health", "1.1", 200)
    access_logger.handlers = []  # what --no-access-log leaves
    access_lines_in("json")

    line = json.loads(stream.getvalue())
    assert (line["logger"], line["message"]) == ("uvicorn.access", '127.0.0.1:5000 - "GET /health HTTP/1.1" 200')
    assert access_logger.handlers == [], "no handler of ours turns the access log back on"
