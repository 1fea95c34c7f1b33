import json

from django.core.management.base import BaseCommand

from queueing.management.tables import seconds, table
from queueing.selectors import fair_share, queue_health, queue_stats

HOLDS = {"paused": "paused head", "retrying": "retry backoff"}


class Command(BaseCommand):
    help = (
        "Tickets by status and the oldest queued age, the sessions held by a paused head or a retry backoff, the "
        "users with the most tickets running, the runs held for their user (cap or turn) and those expired, and the "
        "tickets running on each worker. --json prints what GET /queue/stats answers."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print GET /queue/stats' JSON instead of tables")

    def handle(self, *args, **options):
        if options["json"]:
            self.stdout.write(json.dumps(queue_stats(), indent=2))
            return
        health = queue_health()
        lines = table(("status", "tickets"), health.counts.items())
        lines.append(f"oldest queued: {seconds(health.oldest_queued_age_seconds)}")
        holds = [
            (
                HOLDS.get(reason, reason),
                hold.sessions,
                seconds(hold.oldest_age_seconds if hold.sessions else None),
                hold.waiting,
            )
            for reason, hold in health.held.items()
        ]
        lines += ["", *table(("held by", "sessions", "oldest hold", "queued behind"), holds), ""]
        fair = fair_share()
        if fair.running_by_user:
            lines += [*table(("user", "running"), fair.running_by_user.items()), ""]
        lines += [
            f"held by the user cap: {fair.held_by_cap}",
            f"held for their user's turn: {fair.held_for_turn}",
            f"expired in the queue: {fair.expired}",
            "",
        ]
        if health.in_flight:
            lines += table(("worker", "running"), sorted(health.in_flight.items()))
        else:
            lines.append("no ticket is running")
        self.stdout.write("\n".join(lines))
