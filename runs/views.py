"""HTTP views of the runs API: validate, call one service, serialize."""

from __future__ import annotations

import uuid
from concurrent.futures import Future

from django.views.generic import TemplateView
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from agentos_project.core.conf import current
from agentos_project.core.identity.auth import run_access, token_identity
from agentos_project.core.identity.scopes import COMPONENT, READ_OR_RUN, visible
from agents_registry.registry import ComponentNotFound as RegistryMiss
from agents_registry.registry import registry
from agents_registry.requirements import Answers

from . import schemas
from .events.hub import ready_inbox
from .events.resume import Target, resume_frames
from .events.tail import run_tail
from .exceptions import ComponentNotFound, SessionRequired
from .models import RunStatus
from .responses import cancelled_on_disconnect, inline_json_response, sse_response
from .selectors import run_find, run_get, run_to_wire, run_waiting
from .serializers import (
    CancelSerializer,
    ContinueSerializer,
    PollQuerySerializer,
    ResumeSerializer,
    SubmitSerializer,
    validated,
)
from .services.cancel import run_cancel
from .services.continuation import run_continue
from .services.idempotency import idempotency_key
from .services.submit import run_submit
from .services.unqueued import run_start_inline
from .submission import Accepted, Submission


def component_or_404(kind: str, component_id: str):
    try:
        return registry.get(kind, component_id)
    except RegistryMiss:
        raise ComponentNotFound(f"{kind.capitalize()} not found") from None


def answer(
    run_id: str, kind: str, *, stream: bool, accepted: Accepted | None = None, done: Future | None = None, after=-1
):
    """How a submit or a continue answers: with `stream`, the run's SSE tail from after `after`; else the 202
    (`accepted`) of a background run, or an inline run's body once `done`. Given `done` (an inline run), a
    client that disconnects cancels the run."""
    # The run had not ended when this request saw it, so whatever ends it is published to its buffer.
    fresh = accepted is None or accepted.status in (RunStatus.PENDING, RunStatus.RUNNING)
    inbox = accepted.stream_inbox if accepted is not None else None
    tail = run_tail(run_id, kind, after=after, fresh=fresh, inbox=inbox) if stream else None
    if done is not None:
        return (
            sse_response(cancelled_on_disconnect(run_id, tail))
            if tail is not None
            else inline_json_response(run_id, done)
        )
    if tail is not None:
        return sse_response(tail)
    return Response(accepted.body(), status=status.HTTP_202_ACCEPTED)


class SubmitRunView(APIView):
    kind = "agent"
    scope = (COMPONENT, "run")

    @extend_schema(request=SubmitSerializer, parameters=[schemas.IDEMPOTENCY_KEY], responses=schemas.SUBMIT_RESPONSES)
    def post(self, request, component_id: str):
        component = component_or_404(self.kind, component_id)
        data = validated(SubmitSerializer, request.data, location="body")
        key = idempotency_key(request.headers.get("Idempotency-Key"))
        user_id, session_id = token_identity(
            request, user_id=data.get("user_id") or None, session_id=data.get("session_id") or None
        )
        submission = Submission(
            component=component,
            message=data["message"],
            session_id=session_id or str(uuid.uuid4()),
            requested_session_id=session_id,
            user_id=user_id,
            session_state=data["session_state"],
            metadata=data["metadata"],
            stream=data["stream"],
            background=data["background"],
            expires_in=data["expires_in"],
            idempotency_key=key,
            stream_inbox=ready_inbox() if data["stream"] and data["background"] else None,
        )
        if data["background"]:
            accepted = run_submit(submission=submission)
            return answer(accepted.run_id, component.kind, stream=data["stream"], accepted=accepted)
        run, done = run_start_inline(submission=submission)
        return answer(str(run.run_id), component.kind, stream=data["stream"], done=done)


class RunDetailView(APIView):
    kind = "agent"
    scope = (COMPONENT, "read")

    @extend_schema(parameters=[PollQuerySerializer], responses=schemas.POLL_RESPONSES)
    def get(self, request, component_id: str, run_id: str):
        component_or_404(self.kind, component_id)
        query = validated(PollQuerySerializer, request.query_params, location="query")
        session_id, visible_to = run_access(request, session_id=query["session_id"])
        run = run_get(
            kind=self.kind, component_id=component_id, run_id=run_id, session_id=session_id, visible_to=visible_to
        )
        return Response(run_to_wire(run, waiting=run_waiting(run)))


def _fields(request) -> dict:
    """Form or JSON fields, over the query string's (AgentOS clients send resume fields as a form)."""
    body = request.data.dict() if hasattr(request.data, "dict") else request.data
    return {**request.query_params.dict(), **(body if isinstance(body, dict) else {})}


def _with_session(fields: dict) -> dict:
    """The fields of a request that must name its session (continue, resume): 400 `SessionRequired` when they name
    none, or a blank one, before any other field is checked (a blank one would find the run in any session)."""
    session_id = fields.get("session_id")
    if not session_id or not str(session_id).strip():
        raise SessionRequired()
    return fields


class ContinueRunView(APIView):
    kind = "agent"
    scope = (COMPONENT, "run")

    @extend_schema(request=ContinueSerializer, responses=schemas.CONTINUE_RESPONSES)
    def post(self, request, component_id: str, run_id: str):
        component = component_or_404(self.kind, component_id)
        fields = _with_session(_fields(request))
        data = validated(ContinueSerializer, fields, location="body")
        session_id, visible_to = run_access(request, session_id=data["session_id"], user_id=data.get("user_id") or None)
        continued = run_continue(
            kind=self.kind,
            component_id=component_id,
            run_id=run_id,
            session_id=session_id,
            answers=Answers(
                tools=data["tools"], requirements=data["requirements"], step_requirements=data["step_requirements"]
            ),
            background=data["background"],
            stream=data["stream"],
            visible_to=visible_to,
        )
        return answer(
            continued.accepted.run_id,
            component.kind,
            stream=data["stream"],
            accepted=continued.accepted,
            done=continued.done,
            after=continued.after,
        )


class CancelRunView(APIView):
    kind = "agent"
    scope = (COMPONENT, "run")

    @extend_schema(parameters=[CancelSerializer], request=None, responses=schemas.CANCEL_RESPONSES)
    def post(self, request, component_id: str, run_id: str):
        component_or_404(self.kind, component_id)
        query = validated(CancelSerializer, _fields(request), location="query")
        session_id, visible_to = run_access(request, session_id=query.get("session_id") or None)
        run_cancel(
            kind=self.kind, component_id=component_id, run_id=run_id, session_id=session_id, visible_to=visible_to
        )
        return Response({})


class ResumeRunView(APIView):
    kind = "agent"  # no scope, as AgentOS maps none: a caller's own runs only (`run_access`)

    @extend_schema(request=ResumeSerializer, responses=schemas.RESUME_RESPONSES)
    def post(self, request, component_id: str, run_id: str):
        component_or_404(self.kind, component_id)
        data = validated(ResumeSerializer, _with_session(_fields(request)), location="body")
        session_id, visible_to = run_access(request, session_id=data["session_id"])
        found = {"kind": self.kind, "component_id": component_id, "run_id": run_id, "session_id": session_id}
        run = run_find(**found, visible_to=visible_to)
        target = Target.of(run) if run else None
        after = -1 if data["last_event_index"] is None else data["last_event_index"]
        return sse_response(resume_frames(run_id, target, after=after))


class ComponentListView(APIView):
    kind = "agent"  # no scope: it lists what the caller may read (`visible`)

    @extend_schema(responses={200: schemas.ComponentSerializer(many=True)})
    def get(self, request):
        listed = visible(request, f"{self.kind}s", registry.of_kind(self.kind))
        return Response([component.summary() for component in listed])


class ComponentDetailView(APIView):
    kind = "agent"
    scope = (COMPONENT, "read")

    @extend_schema(responses={200: schemas.ComponentSerializer, 404: schemas.refused("unknown component")})
    def get(self, request, component_id: str):
        return Response(component_or_404(self.kind, component_id).summary())


def _configured(request, kind: str) -> list[dict]:
    """The components of `kind` /config shows the caller: those its scopes let it read or run, as AgentOS'."""
    return [c.summary() for c in visible(request, f"{kind}s", registry.of_kind(kind), READ_OR_RUN)]


class ConfigView(APIView):
    scope = ("config", "read")

    @extend_schema(responses={200: schemas.ConfigSerializer})
    def get(self, request):
        conf = current().queue
        return Response(
            {
                "os_id": "agentos",
                "name": "agentos",
                "description": "Durable background runs for AI agents",
                "databases": ["agentos-db"],
                "agents": _configured(request, "agent"),
                "teams": _configured(request, "team"),
                "workflows": _configured(request, "workflow"),
                "interfaces": [],
                "queue": {"durable": conf.durable, "queue_per_session": conf.effective_per_session},
            }
        )


class TimelinePageView(TemplateView):
    """`/ui/`: the live timeline page (a template with its script inline, kept in two included files,
    `runs/timeline/runs.js` and `runs/timeline/draw.js`; it loads nothing from elsewhere). The page itself holds no
    data; what it shows comes from the API, with the bearer token the visitor gives it."""

    template_name = "runs/timeline.html"
