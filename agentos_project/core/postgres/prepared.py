"""Server-side prepared statements for the statements of the hot path, with psycopg2.

psycopg2 sends every statement as text, which PostgreSQL parses and plans anew: for the queue's larger statements
(an accept, a claim) planning costs more CPU than executing. A `Prepared` statement is prepared once per
connection (`PREPARE`, at its first use there), then sent as `EXECUTE name(values)`. PREPARE survives a rollback
and lasts as long as the connection, so the names prepared are remembered per connection. Parameters are declared
with their types, so one value may serve contexts of different types (text and varchar, say). A pooler that shares
a server connection between transactions (PgBouncer's transaction mode) loses prepared statements: with
`AGENTOS_DB_PREPARE=false` every statement is sent as text, each placeholder cast to its declared type.
"""

from __future__ import annotations

import hashlib
import re
import weakref

from django.db import connection

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_made: dict[str, Prepared] = {}


class Prepared:
    """`sql` with named placeholders `%(name)s`, each of the type `types[name]` (a PostgreSQL type name)."""

    def __init__(self, name: str, sql: str, types: dict[str, str]):
        # The name carries a digest of the SQL: two statements given one name by mistake (or one name's SQL changed
        # by a newer build on a connection that lives on) are never taken for each other.
        self.name = name = f"{name}_{hashlib.blake2s(sql.encode(), digest_size=4).hexdigest()}"
        self.order: list[str] = []

        def number(match: re.Match) -> str:
            key = match.group(1)
            if key not in self.order:
                self.order.append(key)
            return f"${self.order.index(key) + 1}"

        body = _PLACEHOLDER.sub(number, sql)
        missing = set(self.order) - set(types)
        assert not missing, f"no type for {sorted(missing)} in {name}"
        declared = f" ({', '.join(types[key] for key in self.order)})" if self.order else ""  # none: no parentheses
        self.prepare = f"PREPARE {name}{declared} AS {body}"
        self.execute_sql = (
            f"EXECUTE {name} ({', '.join(['%s'] * len(self.order))})" if self.order else f"EXECUTE {name}"
        )
        self.occurrences = _PLACEHOLDER.findall(sql)
        self.text = _PLACEHOLDER.sub(lambda match: f"(%s::{types[match.group(1)]})", sql)
        _made[name] = self

    def call(self, params: dict) -> tuple[str, list]:
        """The EXECUTE for `params` (SQL and its values), prepared on this thread's connection first if need be:
        to send alone or joined with others in one message. Without prepared statements, the statement as text."""
        if not enabled():
            return self.text, [params[key] for key in self.occurrences]
        # Django replaces a persistent connection that failed its health check at the first cursor of a request
        # or task: done here, first, so the connection the names are kept for is the one the EXECUTE reaches.
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        names = _prepared.setdefault(connection.connection, set())
        if self.name not in names:
            with connection.cursor() as cursor:
                # Asked first, so a name this process lost track of never fails (and aborts a transaction).
                cursor.execute("SELECT 1 FROM pg_prepared_statements WHERE name = %s", [self.name])
                if cursor.fetchone() is None:
                    cursor.execute(self.prepare)
            names.add(self.name)
        return self.execute_sql, [params[key] for key in self.order]


def registered() -> dict[str, Prepared]:
    """Every statement this process has made, by name (its digest included): those of the modules loaded, and those
    made as they were first needed (a claim's, which carries the work's SQL)."""
    return dict(_made)


def enabled() -> bool:
    return connection.settings_dict.get("PREPARE", True)


def together(*calls: tuple[str, list]) -> tuple[str, list]:
    """Several statements (SQL, values) as one message."""
    return ";\n".join(sql for sql, _ in calls), [value for _, values in calls for value in values]
