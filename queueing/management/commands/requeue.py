from django.core.management.base import BaseCommand, CommandError

from queueing.exceptions import JobFailedRecently, JobNotRequeueable
from queueing.operations import job_requeue


class Command(BaseCommand):
    help = (
        "Put a failed or cancelled ticket back in line with exactly one more attempt, at the back of its session. "
        "Exits 1 when the ticket is unknown or not failed/cancelled, 3 when it failed within the lease grace "
        "(its worker may still be executing; --force overrides)."
    )

    def add_arguments(self, parser):
        parser.add_argument("job_id", help="the ticket's id (= run_id)")
        parser.add_argument("--force", action="store_true", help="requeue even if it failed within the lease grace")

    def handle(self, *args, job_id, force, **options):
        try:
            ticket = job_requeue(job_id=job_id, force=force)
        except JobNotRequeueable as error:
            raise CommandError(str(error.detail), returncode=1) from None
        except JobFailedRecently as error:
            raise CommandError(str(error.detail), returncode=3) from None
        self.stdout.write(
            f"requeued {ticket.id}: {ticket.status}, attempt {ticket.attempt} of {ticket.max_attempts}, "
            f"session_seq {ticket.session_seq}"
        )
