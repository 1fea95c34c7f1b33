"""Prepared statements (agentos_project.core.postgres.prepared) against the real server."""

from __future__ import annotations

import pytest
from django.db import connection

from agentos_project.core.postgres.prepared import Prepared, together
from tests.support.database import clear_pools, terminate_backend

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = Prepared(
    "agentos_test_echo",
    "SELECT %(word)s || '!', %(n)s + 1, pg_typeof(%(word)s)::text, %(word)s = 'abc'::varchar",
    {"word": "text", "n": "int"},
)


def prepared_names() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements ORDER BY name")
        return [name for (name,) in cursor.fetchall()]


def fresh_connection() -> None:
    """The next query opens a new server connection: the pool's idle ones are closed (pooling goes on)."""
    connection.close()
    clear_pools()


def run(*calls) -> list:
    with connection.cursor() as cursor:
        cursor.execute(*together(*calls))
        return list(cursor.fetchone())


def test_a_statement_is_prepared_once_per_connection_and_again_on_a_new_one():
    fresh_connection()
    assert run(ECHO.call({"word": "abc", "n": 1})) == ["abc!", 2, "text", True]
    assert prepared_names() == [ECHO.name]
    assert run(ECHO.call({"word": "it's", "n": 41})) == ["it's!", 42, "text", False], "no second PREPARE"

    connection.close()  # back to the pool: the next connect takes it again, prepared
    assert run(ECHO.call({"word": "y", "n": 0})) == ["y!", 1, "text", False]
    fresh_connection()
    assert prepared_names() == [], "a new server connection has none"
    assert run(ECHO.call({"word": "x", "n": None})) == ["x!", None, "text", False]
    assert prepared_names() == [ECHO.name]


def test_two_statements_given_one_name_are_kept_apart():
    fresh_connection()
    ten = Prepared("agentos_test_same", "SELECT %(n)s * 10", {"n": "int"})
    hundred = Prepared("agentos_test_same", "SELECT %(n)s * 100", {"n": "int"})

    assert (run(ten.call({"n": 2})), run(hundred.call({"n": 2}))) == ([20], [200])
    assert ECHO.name.startswith("agentos_test_echo_") and ten.name != hundred.name


def test_a_statement_without_parameters_is_prepared_and_executed_too():
    fresh_connection()
    constant = Prepared("agentos_test_constant", "SELECT 6 * 7", {})

    assert (run(constant.call({})), run(constant.call({"unused": 1}))) == ([42], [42])
    assert prepared_names() == [constant.name]


def test_executes_joined_in_one_message_answer_with_the_last():
    fresh_connection()
    other = Prepared("agentos_test_other", "SELECT %(n)s * 10", {"n": "int"})

    assert run(ECHO.call({"word": "a", "n": 1}), other.call({"n": 7})) == [70]


def test_without_prepared_statements_the_same_values_go_as_typed_text(monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "PREPARE", False)
    fresh_connection()

    sql, values = ECHO.call({"word": "abc", "n": 1})

    assert sql.count("%s::text") == 3 and "EXECUTE" not in sql
    assert run((sql, values)) == ["abc!", 2, "text", True]
    assert prepared_names() == []


def test_a_connection_the_server_dropped_is_replaced_before_an_execute_is_sent():
    fresh_connection()
    assert run(ECHO.call({"word": "a", "n": 1})) == ["a!", 2, "text", False]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (dropped,) = cursor.fetchone()
    terminate_backend(dropped)
    connection.health_check_done = False  # as at the start of each request or task

    assert run(ECHO.call({"word": "b", "n": 2})) == ["b!", 3, "text", False]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != dropped
    assert prepared_names() == [ECHO.name]
