import dataclasses

from django.core.management.base import BaseCommand

from agentos_project.conf import current
from queueing.sweeper import sweep_once


class Command(BaseCommand):
    help = "Run one sweeper pass: stale leases, lost messages, retention."

    def handle(self, *args, **options):
        report = sweep_once(current().queue)
        self.stdout.write(" ".join(f"{name}={value}" for name, value in dataclasses.asdict(report).items()))
