"""Request validation: a serializer whose fields each thread binds once gives every request its own answer."""

from __future__ import annotations

import pytest

from agentos_project.core.exceptions import RequestInvalid
from agentos_project.core.validation import validated
from runs.serializers import SubmitSerializer
from tests.support.waiting import in_threads


def answer(data: dict):
    try:
        return validated(SubmitSerializer, data, location="body")
    except RequestInvalid as refusal:
        return refusal.detail


def test_requests_validated_one_after_another_on_one_thread_do_not_see_each_other():
    assert answer({"message": "hi", "session_id": "s"})["session_id"] == "s"
    refused = answer({"session_id": "x" * 256})
    assert [(e["loc"], e["type"]) for e in refused] == [
        (["body", "message"], "missing"),
        (["body", "session_id"], "max_length"),
    ]
    assert answer({"message": "again"}) == {
        "message": "again",
        "stream": True,
        "background": False,
        "session_state": None,
        "metadata": None,
        "expires_in": None,
    }


@pytest.mark.parametrize("threads", [8])
def test_threads_validating_at_once_each_get_their_own_answers(threads):
    def work(index: int) -> list:
        return [answer({"message": f"m{index}-{n}"} if n % 2 else {"message": " "}) for n in range(50)]

    for index, answers in enumerate(in_threads(threads, work)):
        for n, result in enumerate(answers):
            if n % 2:
                assert result["message"] == f"m{index}-{n}"
            else:
                assert [e["msg"] for e in result] == ["Field must not be blank"]
