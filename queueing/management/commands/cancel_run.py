from django.core.management.base import BaseCommand, CommandError

from queueing.exceptions import JobNotFound
from queueing.operations import job_cancel

OUTCOMES = {
    "cancelled": "cancelled {id}",
    "requested": "cancel requested for {id}: it is running; its worker stops it at the next checkpoint",
    # Exit 0, as the API's cancel answers 200 for an ended run: what the operator wanted (the run no longer
    # executes) holds, so a script that cancels again, or races the run's end, does not see a failure.
    "finished": "{id} already finished; nothing to cancel",
}


class Command(BaseCommand):
    help = (
        "Cancel a run wherever it is (CONTRACT 9): a queued or paused one at once, a running one at its next "
        "checkpoint. Exits 0 when cancelled, requested or already finished, 1 when there is no such ticket."
    )

    def add_arguments(self, parser):
        parser.add_argument("job_id", help="the ticket's id (= run_id)")

    def handle(self, *args, job_id, **options):
        outcome = job_cancel(job_id=job_id)
        if outcome not in OUTCOMES:
            raise CommandError(str(JobNotFound(job_id).detail), returncode=1)
        self.stdout.write(OUTCOMES[outcome].format(id=job_id))
