import dataclasses

from django.core.management.base import BaseCommand, CommandError

from agentos_project.core.conf import current
from queueing.management.tables import table
from queueing.sweeper import sweep_once

LABELS = {
    "failed": "stale leases failed (no attempt left)",
    "parked": "stale leases parked back to paused",
    "resumed": "stale leases queued again (work kept)",
    "cancelled": "stale leases cancelled (cancel asked)",
    "expired": "queued runs expired (deadline passed)",
    "released": "held runs let in (their user had room)",
    "redispatched": "stale leases dispatched for a reclaim",
    "lost_messages": "lost messages published again",
    "pruned": "terminal tickets pruned (past retention)",
    "errors": "steps that raised (see the log)",
}


class Command(BaseCommand):
    help = (
        "Run one sweeper pass (stale leases, deadlines, held runs, lost messages, retention) and print what it did. "
        "Exits 1 when a step raised (the log says which), so cron notices."
    )

    def handle(self, *args, **options):
        report = dataclasses.asdict(sweep_once(current().queue))
        rows = [(LABELS.get(name, name), count) for name, count in report.items()]
        self.stdout.write("\n".join(table(("sweep", "count"), rows)))
        if report["errors"]:
            raise CommandError(f"{report['errors']} sweep step(s) raised; see the log", returncode=1)
