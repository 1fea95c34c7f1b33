import json
import time

from django.core.management.base import BaseCommand, CommandError

from queueing.management.tables import moment, short, table
from queueing.models import Ticket
from queueing.selectors import JOB_STATUSES, SORTABLE, tickets_page
from queueing.serializers import ticket_to_wire

HEADERS = ("id", "status", "attempt", "session_id", "seq", "component", "created", "error")


class Command(BaseCommand):
    help = (
        "List tickets, newest first, as GET /queue/jobs does (--status failed is the dead-letter list). "
        "Exits 2 on a bad filter, with the API's text."
    )

    def add_arguments(self, parser):
        parser.add_argument("--status", action="append", default=[], help=f"repeatable; one of {JOB_STATUSES}")
        parser.add_argument("--session", action="append", default=[], help="a session_id; repeatable")
        parser.add_argument("--user", help="a user_id")
        parser.add_argument("--limit", type=int, default=20, help="tickets per page, 1 to 1000 (default 20)")
        parser.add_argument("--page", type=int, default=1, help="from 1 (default 1)")
        parser.add_argument("--sort-by", choices=SORTABLE, default="created_at")
        parser.add_argument("--asc", action="store_true", help="oldest first")
        parser.add_argument("--json", action="store_true", help="print GET /queue/jobs' JSON instead of a table")

    def handle(self, *args, status, session, user, limit, page, sort_by, asc, **options):
        started = time.perf_counter()
        _check(status, session, user, limit, page)
        tickets, total = tickets_page(
            statuses=status, session_ids=session, user_id=user, limit=limit, page=page, sort_by=sort_by, descending=not asc
        )
        pages = (total + limit - 1) // limit
        if options["json"]:
            took = round(1000 * (time.perf_counter() - started), 2)
            meta = {"page": page, "limit": limit, "total_pages": pages, "total_count": total, "search_time_ms": took}
            self.stdout.write(json.dumps({"data": [ticket_to_wire(t) for t in tickets], "meta": meta}, indent=2))
        elif not tickets:
            self.stdout.write(f"no tickets on page {page} of {pages} ({total} match)" if total else "no tickets match")
        else:
            paging = f", page {page} of {pages}" if pages > 1 else ""
            lines = [*table(HEADERS, map(_row, tickets)), f"{len(tickets)} of {total} ticket(s){paging}"]
            self.stdout.write("\n".join(lines))


def _row(ticket: Ticket) -> tuple:
    return (
        str(ticket.id),
        ticket.status,
        f"{ticket.attempt}/{ticket.max_attempts}",
        ticket.session_id,
        ticket.session_seq,
        f"{ticket.component_type}/{ticket.component_id}",
        moment(ticket.created_at),
        short(ticket.error),
    )


def _check(statuses: list[str], session_ids: list[str], user_id: str | None, limit: int, page: int) -> None:
    """The checks of GET /queue/jobs, with its texts; a usage error (exit 2) here."""
    for status in statuses:
        if status not in JOB_STATUSES:
            raise CommandError(f"Invalid status {status!r}; expected one of {JOB_STATUSES}", returncode=2)
    if not all(session_ids) or user_id == "":
        raise CommandError("session_id and user_id must not be empty", returncode=2)
    if not 1 <= limit <= 1000 or page < 1:
        raise CommandError(f"--limit must be 1 to 1000 and --page at least 1 (got {limit} and {page})", returncode=2)
