from django.core.management.base import BaseCommand, CommandError

from agentos_project.core.conf import current
from queueing.tickets import ticket_prune

BATCH = 1000  # rows per DELETE: each batch is a short transaction of its own, however many tickets are old


class Command(BaseCommand):
    help = (
        "Delete terminal tickets (completed, failed, cancelled) that ended longer ago than --older-than seconds "
        "(default AGENTOS_RETENTION_SECONDS). Paused tickets are never deleted."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, metavar="SECONDS", help="default: AGENTOS_RETENTION_SECONDS")

    def handle(self, *args, older_than, **options):
        window = current().queue.retention_seconds if older_than is None else older_than
        if window < 0:
            raise CommandError(f"--older-than must be at least 0 (got {window:.15g})", returncode=2)
        pruned = deleted = ticket_prune(retention_seconds=window, batch=BATCH)
        while deleted == BATCH:
            deleted = ticket_prune(retention_seconds=window, batch=BATCH)
            pruned += deleted
        self.stdout.write(f"pruned {pruned} ticket(s) older than {window:.15g}s")
