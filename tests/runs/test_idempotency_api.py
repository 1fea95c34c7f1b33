"""Idempotency-Key (CONTRACT 7): replays, refusals with their exact texts, scope, and the concurrent race."""

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from agentos_project.core.conf import current
from queueing.models import Ticket
from queueing.worker import worker_execute
from runs.models import Run
from tests.support.runs import submit
from tests.support.waiting import in_threads

from .conftest import row_counts

OTHER_COMPONENT = (
    "Idempotency-Key was already used by a different component; reuse a key only to retry the identical submission"
)


def submit_with_key(api, key: str | None = None, **fields):
    """Submit an invoice run with an Idempotency-Key (none when `key` is None); the answer."""
    environ = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else None
    return submit(api, environ=environ, **{"message": "pay the invoice sleep=0", **fields})


@pytest.mark.django_db
def test_a_duplicate_returns_the_original_run_with_its_current_status(api):
    first = submit_with_key(api, "key-1", session_id="s-idem")
    second = submit_with_key(api, "key-1", session_id="s-idem")

    assert (first.status_code, second.status_code) == (202, 202)
    assert second.json() == first.json()
    assert Run.objects.count() == 1
    worker_execute(ticket_id=first.json()["run_id"])
    assert submit_with_key(api, "key-1", session_id="s-idem").json()["status"] == "COMPLETED"


@pytest.mark.django_db
def test_a_failed_run_replays_as_error(api):
    first = submit_with_key(api, "key-err", message="explode sleep=0").json()
    worker_execute(ticket_id=first["run_id"])

    assert submit_with_key(api, "key-err", message="explode sleep=0").json() == {**first, "status": "ERROR"}


@pytest.mark.django_db
def test_a_replay_without_session_id_returns_the_session_made_for_the_original(api):
    first = submit_with_key(api, "key-new-session").json()

    assert submit_with_key(api, "key-new-session").json()["session_id"] == first["session_id"]


@pytest.mark.django_db
def test_reuse_on_another_component_is_409(api):
    submit_with_key(api, "key-2")
    before = row_counts()

    response = submit_with_key(api, "key-2", prefix="/agents/other-agent")

    assert (response.status_code, response.json()) == (409, {"detail": OTHER_COMPONENT})
    assert row_counts() == before


@pytest.mark.django_db
def test_a_stream_replay_of_a_non_stream_submission_is_409(api):
    run_id = submit_with_key(api, "key-3").json()["run_id"]
    before = row_counts()

    response = submit_with_key(api, "key-3", stream="true")

    assert response.status_code == 409
    detail = f"Idempotency-Key was used by a non-streaming submission; poll run {run_id} instead of attaching a stream"
    assert response.json() == {"detail": detail}
    assert row_counts() == before


@pytest.mark.parametrize(
    "change",
    [
        {"message": "pay another invoice"},
        {"session_id": "elsewhere"},
        {"session_state": '{"a": 1}'},
        {"metadata": "{}"},
    ],
)
@pytest.mark.django_db
def test_reuse_with_a_different_request_is_422_and_writes_nothing(api, change):
    submit_with_key(api, "key-4", session_id="s-4")
    before = row_counts()

    response = submit_with_key(api, "key-4", **{"session_id": "s-4", **change})

    assert (response.status_code, response.json()) == (
        422,
        {"detail": "Idempotency-Key was reused with a different request"},
    )
    assert row_counts() == before


@pytest.mark.django_db
def test_a_key_longer_than_512_characters_is_422(api):
    before = row_counts()

    response = submit_with_key(api, "k" * 513)

    assert (response.status_code, response.json()) == (
        422,
        {"detail": "Idempotency-Key must be at most 512 characters"},
    )
    assert row_counts() == before
    assert submit_with_key(api, "k" * 512).status_code == 202


@pytest.mark.django_db
def test_an_empty_key_is_no_key(api):
    submit_with_key(api, "")
    submit_with_key(api, "")

    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_keys_are_scoped_by_user(api):
    ana = submit_with_key(api, "shared", user_id="ana").json()
    bob = submit_with_key(api, "shared", user_id="bob").json()

    assert ana["run_id"] != bob["run_id"]
    assert set(Ticket.objects.values_list("idempotency_scope", flat=True)) == {"ana", "bob"}


@pytest.mark.django_db
def test_idempotency_is_checked_before_queue_depth(api):
    first = submit_with_key(api, "key-5").json()
    with override_settings(AGENTOS=current().replace("queue", max_queue_depth=1)):
        assert submit_with_key(api, "other").status_code == 429
        assert submit_with_key(api, "key-5").json() == first


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_identical_submits_make_one_run():
    answers = in_threads(20, lambda i: submit_with_key(APIClient(), "race-key", session_id="s-race"))

    assert [a.status_code for a in answers] == [202] * 20
    assert len({a.json()["run_id"] for a in answers}) == 1
    assert (Run.objects.count(), Ticket.objects.count()) == (1, 1)
