import signal
import threading

from django.core.management.base import BaseCommand

from agentos_project.core.conf import current
from queueing.sweeper import run_forever


class Command(BaseCommand):
    help = "Run the sweeper in the foreground, one pass every AGENTOS_POLL_INTERVAL, until SIGINT or SIGTERM."

    def handle(self, *args, **options):
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        run_forever(current().queue, stop)
