"""The pooled PostgreSQL backend: connections closed by one request thread are reused by the next."""

import threading

import pytest
from django.db import connection

from ..conftest import terminate_backend

pytestmark = pytest.mark.django_db(transaction=True)


def on_a_new_thread(work):
    """Run `work` as a request would under ASGI: on a thread of its own, closing its connection at the end."""
    result = []

    def run():
        try:
            result.append(work())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result[0]


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_closed_connection_is_reused_by_the_next_thread():
    assert on_a_new_thread(backend_pid) == on_a_new_thread(backend_pid)


def test_a_connection_killed_while_idle_is_replaced_not_handed_out():
    first = on_a_new_thread(backend_pid)
    terminate_backend(first)

    second = on_a_new_thread(backend_pid)

    assert second != first


def test_a_connection_left_inside_a_transaction_is_not_pooled():
    def leave_transaction_open():
        connection.set_autocommit(False)
        return backend_pid()

    first = on_a_new_thread(leave_transaction_open)

    assert on_a_new_thread(backend_pid) != first
