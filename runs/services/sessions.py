"""A session's owner: the component and user that created it."""

from __future__ import annotations

from django.db import connection

from ..exceptions import SessionNotYours
from ..models import AgentSession

SESSIONS = AgentSession._meta.db_table


def session_own(*, session_id: str, component_type: str, component_id: str, user_id: str | None) -> None:
    """Create the session for this component and user, or make sure an existing one is theirs.

    A session belongs to the component and user that created it; anyone else naming it gets `SessionNotYours`
    (409) and never sees its history. One statement in the common case: the insert, or else the owner's row.
    A row whose creator had not committed when the statement began is read again once that creator is done.
    """
    owner = (component_type, component_id, user_id)
    existing = f"SELECT component_type, component_id, user_id FROM {SESSIONS} WHERE session_id = %s"
    own = f"""
        WITH inserted AS (
            INSERT INTO {SESSIONS} (session_id, component_type, component_id, user_id, session_state)
            VALUES (%s, %s, %s, %s, '{{}}') ON CONFLICT (session_id) DO NOTHING
            RETURNING component_type, component_id, user_id)
        SELECT * FROM inserted UNION ALL {existing} LIMIT 1
    """
    with connection.cursor() as cursor:
        cursor.execute(own, [session_id, *owner, session_id])
        row = cursor.fetchone()
        if row is None:
            cursor.execute(existing, [session_id])
            row = cursor.fetchone()
    if tuple(row) != owner:
        raise SessionNotYours(session_id)
