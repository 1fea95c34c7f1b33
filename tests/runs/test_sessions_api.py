"""A session belongs to the component and user that created it (its history is theirs alone)."""

import pytest
from rest_framework.test import APIClient

from queueing.worker import worker_execute
from runs.models import AgentSession, Run
from runs.selectors import session_history
from tests.support.runs import submit
from tests.support.waiting import in_threads

from .conftest import row_counts

pytestmark = pytest.mark.django_db


def refused(session_id: str) -> dict:
    return {"detail": f"Session {session_id} belongs to another user or component; use a session_id of your own"}


@pytest.fixture
def anas_session(api):
    first = submit(api, message="my secret sleep=0", session_id="chat-ana", user_id="ana").json()
    worker_execute(ticket_id=first["run_id"])
    return "chat-ana"


@pytest.mark.parametrize(
    ("prefix", "user_id"),
    [
        ("/agents/stub-agent", "bob"),
        ("/agents/stub-agent", None),
        ("/agents/other-agent", "ana"),
        ("/teams/stub-team", "ana"),
    ],
    ids=["another-user", "anonymous", "another-agent", "a-team"],
)
@pytest.mark.parametrize("background", ["true", "false"])
def test_naming_someone_elses_session_is_refused_and_reads_nothing(api, anas_session, prefix, user_id, background):
    before = row_counts()
    fields = {"message": "what did ana say? sleep=0", "session_id": anas_session, "background": background}
    if user_id:
        fields["user_id"] = user_id

    response = submit(api, prefix=prefix, **fields)

    assert (response.status_code, response.json()) == (409, refused(anas_session))
    assert row_counts() == before
    assert len(session_history(session_id=anas_session)) == 2


def test_the_owner_goes_on_with_its_history(api, anas_session):
    response = submit(api, message="again sleep=0", session_id=anas_session, user_id="ana")

    assert response.status_code == 202
    worker_execute(ticket_id=response.json()["run_id"])
    assert Run.objects.get(pk=response.json()["run_id"]).content == "echo: again sleep=0 (history: 2 messages)"


@pytest.mark.django_db(transaction=True)
def test_racing_creators_of_one_session_get_one_owner():
    def client(number: int) -> tuple[str, int]:
        user = "ana" if number % 2 else "bob"
        return user, submit(APIClient(), message="hi", session_id="contested", user_id=user).status_code

    answers = in_threads(10, client)

    owner = AgentSession.objects.get(pk="contested").user_id
    assert {status for user, status in answers if user == owner} == {202}
    assert {status for user, status in answers if user != owner} == {409}
    assert set(Run.objects.values_list("user_id", flat=True)) == {owner}
