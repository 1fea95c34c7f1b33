import datetime
import json

from django.core.management.base import BaseCommand, CommandError

from queueing.exceptions import BadQueueQuery
from queueing.management.tables import moment, short, table
from queueing.operations import job_search
from queueing.selectors import JOB_STATUSES, SORTABLE

HEADERS = ("id", "status", "attempt", "session_id", "session_seq", "component", "created", "error")


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
        parser.add_argument(
            "--sort-by", choices=SORTABLE, default="created_at", metavar="FIELD", help=f"one of {', '.join(SORTABLE)}"
        )
        parser.add_argument("--asc", action="store_true", help="oldest first")
        parser.add_argument("--json", action="store_true", help="print GET /queue/jobs' JSON instead of a table")

    def handle(self, *args, status, session, user, limit, page, sort_by, asc, **options):
        if not 1 <= limit <= 1000 or page < 1:
            raise CommandError(
                f"--limit must be 1 to 1000 and --page at least 1 (got {limit} and {page})", returncode=2
            )
        try:
            found = job_search(
                statuses=status,
                session_ids=session,
                user_id=user,
                limit=limit,
                page=page,
                sort_by=sort_by,
                descending=not asc,
            )
        except BadQueueQuery as refusal:
            raise CommandError(str(refusal.detail), returncode=2) from None
        if options["json"]:
            self.stdout.write(json.dumps(found, indent=2))
            return
        jobs, total, pages = found["data"], found["meta"]["total_count"], found["meta"]["total_pages"]
        if not jobs:
            self.stdout.write(f"no tickets on page {page} of {pages} ({total} match)" if total else "no tickets match")
        else:
            paging = f", page {page} of {pages}" if pages > 1 else ""
            lines = [*table(HEADERS, map(_row, jobs)), f"{len(jobs)} of {total} ticket(s){paging}"]
            self.stdout.write("\n".join(lines))


def _row(job: dict) -> tuple:
    return (
        job["id"],
        job["status"],
        f"{job['attempt']}/{job['max_attempts']}",
        job["session_id"],
        job["session_seq"],
        f"{job['component_type']}/{job['component_id']}",
        moment(datetime.datetime.fromtimestamp(job["created_at"], datetime.UTC)),
        short(job["error"]),
    )
