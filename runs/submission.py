"""What a submit carries into the services, and what its 202 answers."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from agents_registry.components import Component
from queueing.seam import job_payload


@dataclasses.dataclass(frozen=True)
class Submission:
    """A submit as the client sent it. `requested_session_id` is None when the client sent none (a new
    session, `session_id`, was made for it)."""

    component: Component
    message: str
    session_id: str
    user_id: str | None
    session_state: dict | None
    metadata: dict | None
    stream: bool
    background: bool
    requested_session_id: str | None = None
    idempotency_key: str | None = None
    stream_inbox: str | None = None  # the submitting web process's inbox, when the client reads the stream there
    expires_in: float | None = None  # seconds it may wait in the queue for its start (None: the default, if any)

    def digest(self) -> str:
        """What identifies the request for Idempotency-Key replays: everything the client chose but the stream."""
        chosen = {
            "component": [self.component.kind, self.component.id],
            "message": self.message,
            "session_id": self.requested_session_id,
            "user_id": self.user_id,
            "session_state": self.session_state,
            "metadata": self.metadata,
            **({"expires_in": self.expires_in} if self.expires_in is not None else {}),
        }
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()

    def payload(self) -> dict:
        """What the ticket carries for operators: AgentOS' job payload (the message as `input`, the JSON fields
        sent as `kwargs`), and the submission as the client sent it beside it."""
        arguments = {"session_state": self.session_state, "metadata": self.metadata}
        return job_payload(
            message=self.message,
            kwargs={name: value for name, value in arguments.items() if value is not None},
            user_id=self.user_id,
            stream=self.stream,
            background=self.background,
            **arguments,
            **({"expires_in": self.expires_in} if self.expires_in is not None else {}),
        )


@dataclasses.dataclass(frozen=True)
class Accepted:
    """The 202 body: the run, its session, its status now (PENDING unless an Idempotency-Key replayed it); and,
    not part of it, the inbox the run's events go to when this very submit accepted it with one."""

    run_id: str
    session_id: str
    status: str
    stream_inbox: str | None = dataclasses.field(default=None, compare=False)

    def body(self) -> dict:
        return {"run_id": self.run_id, "session_id": self.session_id, "status": self.status}
