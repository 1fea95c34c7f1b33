"""Settings from the environment (CONTRACT 2): defaults, every rule, and the one-line start-up refusal."""

import os
import subprocess
import sys

import pytest

from agentos_project.core.conf import (
    EMBEDDED_DATABASE_URL,
    EMBEDDED_REDIS_URL,
    AgentsSettings,
    ConfigError,
    HttpLimits,
    Security,
    Server,
    Services,
    load,
)
from tests.support.processes import ROOT


def test_defaults():
    conf = load({})

    assert conf.services == Services(EMBEDDED_DATABASE_URL, EMBEDDED_REDIS_URL, EMBEDDED_REDIS_URL)
    queue = conf.queue
    assert (queue.durable, queue.per_session, queue.max_concurrency) == (True, True, 32)
    assert (queue.max_queue_depth, queue.max_attempts, queue.retry_delay_seconds) == (1000, 1, 30.0)
    assert (queue.timeout_seconds, queue.lock_grace_seconds, queue.stop_timeout_seconds) == (3600.0, 60.0, 30.0)
    assert (queue.retention_seconds, queue.poll_interval, queue.heartbeat_interval) == (86400.0, 1.0, 20.0)
    assert conf.security == Security(security_key=None, admin_token=None)
    assert conf.agents == AgentsSettings(demo_agents=True, openai_base_url=None, openai_model="gpt-4o-mini")
    assert conf.server == Server(host="127.0.0.1", port=7777)
    assert (conf.server.worker_nice, conf.server.web_threads) == (10, 4)
    assert conf.http == HttpLimits(
        max_header_bytes=65536, max_headers=100, header_timeout_seconds=20.0, body_timeout_seconds=30.0
    )


def test_values_are_parsed():
    conf = load(
        {
            "REDIS_URL": "redis://cache:6379/2",
            "AGENTOS_QUEUE_PER_SESSION": "false",
            "AGENTOS_MAX_CONCURRENCY": "0",
            "AGENTOS_LOCK_GRACE_SECONDS": "4",
            "AGENTOS_TIMEOUT_SECONDS": "",
            "AGENTOS_SECURITY_KEY": "k",
            "AGENTOS_WORKER_NICE": "0",
            "AGENTOS_WEB_THREADS": "16",
            "AGENTOS_MAX_HEADER_BYTES": "8192",
            "AGENTOS_MAX_HEADERS": "20",
            "AGENTOS_HEADER_TIMEOUT_SECONDS": "",
            "AGENTOS_BODY_TIMEOUT_SECONDS": "2.5",
        }
    )

    assert conf.services.celery_broker_url == "redis://cache:6379/2", "the broker defaults to REDIS_URL"
    queue = conf.queue
    assert (queue.per_session, queue.max_concurrency, queue.timeout_seconds) == (False, None, None)
    assert (queue.stop_timeout_seconds, queue.heartbeat_interval, conf.security.security_key) == (3.0, 4 / 3, "k")
    assert (conf.server.worker_nice, conf.server.web_threads) == (0, 16)
    http = conf.http
    assert (http.max_header_bytes, http.max_headers, http.header_timeout_seconds, http.body_timeout_seconds) == (
        8192,
        20,
        None,
        2.5,
    )


def test_jwt_is_on_with_keys_or_a_jwks_file():
    assert load({}).security.jwt is False
    one = load({"AGENTOS_JWT_VERIFICATION_KEYS": "secret", "AGENTOS_JWT_ALGORITHM": "HS256"}).security
    two = load({"AGENTOS_JWT_VERIFICATION_KEYS": '["old", "new"]', "AGENTOS_AUTHORIZATION": "true"}).security
    assert (one.jwt, one.jwt_verification_keys, one.jwt_algorithm) == (True, ("secret",), "HS256")
    assert (two.jwt_verification_keys, two.jwt_algorithm, two.authorization) == (("old", "new"), "RS256", True)
    assert (one.jwt_issuer, one.jwt_require_exp) == (None, True)
    pinned = load({"AGENTOS_JWT_ISSUER": "https://idp.example.com", "AGENTOS_JWT_REQUIRE_EXP": "false"}).security
    assert (pinned.jwt_issuer, pinned.jwt_require_exp) == ("https://idp.example.com", False)


def test_concurrency_alias_and_precedence():
    assert load({"AGNO_BACKGROUND_MAX_CONCURRENCY": "8"}).queue.max_concurrency == 8
    assert load({"AGNO_BACKGROUND_MAX_CONCURRENCY": "8", "AGENTOS_MAX_CONCURRENCY": "4"}).queue.max_concurrency == 4


def test_per_session_order_is_off_without_the_durable_queue():
    assert load({"AGENTOS_QUEUE_DURABLE": "false"}).queue.effective_per_session is False


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL must be a URL with scheme postgres or postgresql"),
        ({"REDIS_URL": "http://x"}, "REDIS_URL must be a URL with scheme redis or rediss or unix"),
        ({"CELERY_BROKER_URL": "sqs://x"}, "CELERY_BROKER_URL must be a URL"),
        ({"AGENTOS_QUEUE_DURABLE": "maybe"}, "AGENTOS_QUEUE_DURABLE must be true or false"),
        ({"AGENTOS_MAX_CONCURRENCY": "lots"}, "AGENTOS_MAX_CONCURRENCY must be an integer"),
        ({"AGENTOS_MAX_QUEUE_DEPTH": "-1"}, "AGENTOS_MAX_QUEUE_DEPTH must be >= 0"),
        ({"AGENTOS_MAX_ATTEMPTS": "0"}, "AGENTOS_MAX_ATTEMPTS must be >= 1"),
        ({"AGENTOS_RETRY_DELAY_SECONDS": "soon"}, "AGENTOS_RETRY_DELAY_SECONDS must be a number of seconds"),
        ({"AGENTOS_TIMEOUT_SECONDS": "0"}, "AGENTOS_TIMEOUT_SECONDS must be > 0"),
        ({"AGENTOS_LOCK_GRACE_SECONDS": "2"}, "AGENTOS_LOCK_GRACE_SECONDS must be >= 3"),
        ({"AGENTOS_STOP_TIMEOUT_SECONDS": "60"}, "AGENTOS_STOP_TIMEOUT_SECONDS must be < AGENTOS_LOCK_GRACE_SECONDS"),
        ({"AGENTOS_RETENTION_SECONDS": "-5"}, "AGENTOS_RETENTION_SECONDS must be >= 0"),
        ({"AGENTOS_POLL_INTERVAL": "0"}, "AGENTOS_POLL_INTERVAL must be > 0"),
        ({"AGENTOS_POLL_INTERVAL": "nan"}, "AGENTOS_POLL_INTERVAL must be > 0"),
        ({"AGENTOS_PORT": "0"}, "AGENTOS_PORT must be >= 1"),
        ({"AGENTOS_WORKER_NICE": "-1"}, "AGENTOS_WORKER_NICE must be >= 0"),
        ({"AGENTOS_WORKER_NICE": "20"}, "AGENTOS_WORKER_NICE must be <= 19"),
        ({"AGENTOS_WEB_THREADS": "0"}, "AGENTOS_WEB_THREADS must be >= 1"),
        ({"AGENTOS_STEP_MAX_BYTES": "10"}, "AGENTOS_STEP_MAX_BYTES must be >= 1024"),
        ({"AGENTOS_MAX_HEADER_BYTES": "1024"}, "AGENTOS_MAX_HEADER_BYTES must be >= 4096"),
        ({"AGENTOS_MAX_HEADERS": "many"}, "AGENTOS_MAX_HEADERS must be an integer"),
        ({"AGENTOS_MAX_HEADERS": "5"}, "AGENTOS_MAX_HEADERS must be >= 10"),
        ({"AGENTOS_HEADER_TIMEOUT_SECONDS": "0"}, "AGENTOS_HEADER_TIMEOUT_SECONDS must be > 0"),
        ({"AGENTOS_BODY_TIMEOUT_SECONDS": "-1"}, "AGENTOS_BODY_TIMEOUT_SECONDS must be > 0"),
        ({"AGENTOS_JWT_ALGORITHM": "none"}, "AGENTOS_JWT_ALGORITHM must be one of HS256, HS384"),
        ({"AGENTOS_JWT_VERIFICATION_KEYS": "[1, 2]"}, "AGENTOS_JWT_VERIFICATION_KEYS must be one key, or a JSON list"),
        ({"AGENTOS_JWT_VERIFICATION_KEYS": "[oops"}, "AGENTOS_JWT_VERIFICATION_KEYS is not a JSON list of keys"),
        ({"AGENTOS_JWT_JWKS_FILE": "/nonexistent/jwks.json"}, "AGENTOS_JWT_JWKS_FILE names no readable file"),
        ({"AGENTOS_AUTHORIZATION": "true"}, "AGENTOS_AUTHORIZATION=true needs AGENTOS_JWT_VERIFICATION_KEYS"),
        ({"AGENTOS_JWT_REQUIRE_EXP": "maybe"}, "AGENTOS_JWT_REQUIRE_EXP must be true or false"),
    ],
)
def test_bad_values_name_the_variable_and_the_rule(environ, message):
    with pytest.raises(ConfigError) as error:
        load(environ)

    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_a_bad_value_stops_start_up_with_one_line():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentos_project.settings.base", "AGENTOS_LOCK_GRACE_SECONDS": "1"}

    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 2
    assert result.stderr == "agentos: configuration error: AGENTOS_LOCK_GRACE_SECONDS must be >= 3 (got '1')\n"


def test_a_refused_url_is_shown_without_its_password():
    with pytest.raises(ConfigError) as error:
        load({"DATABASE_URL": "mysql://admin:hunter2@db:3306/agentos"})

    assert str(error.value) == (
        "DATABASE_URL must be a URL with scheme postgres or postgresql (got 'mysql://admin:***@db:3306/agentos')"
    )
