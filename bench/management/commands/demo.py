import requests
from django.core.management.base import BaseCommand, CommandError

from bench.demo import draw, run_scenario, timeline
from bench.harness import Client


class Command(BaseCommand):
    help = (
        "Replay the seed scenario against a running server (make serve): A, B, C on chat-1 and D on chat-2, "
        "each a 1 s stub model call, and print who started when and whom each run waited on."
    )

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:7777")
        parser.add_argument("--png", metavar="FILE", help="also draw the timeline into this PNG file")
        parser.add_argument(
            "--no-order",
            action="store_true",
            help="show the scenario on a server started with AGENTOS_QUEUE_PER_SESSION=false",
        )
        parser.add_argument("--sleep", type=float, default=1.0, help="seconds each stub model call takes")

    def handle(self, *args, url, png, no_order, sleep, **options):
        client = Client(url)
        try:
            queue = client.http.get(f"{client.url}/config", timeout=5).json()["queue"]
        except requests.RequestException as error:
            raise CommandError(f"no agentos answers at {url} ({error}); start one with `make serve`") from None
        if queue["queue_per_session"] == no_order:
            wanted = "off (AGENTOS_QUEUE_PER_SESSION=false)" if no_order else "on"
            raise CommandError(
                f"the server at {url} has per-session order {'on' if not no_order else 'off'}; "
                f"start one with it {wanted} for this demo"
            )
        title = f"per-session order {'off' if no_order else 'on'} ({url})"
        lanes = run_scenario(client, sleep=sleep)
        self.stdout.write(f"agentos demo: {title}\n{timeline(lanes)}")
        if png:
            try:
                draw(lanes, png, title)
            except ImportError:
                raise CommandError("--png needs matplotlib: make venv (requirements-dev.txt)") from None
            self.stdout.write(f"timeline drawn in {png}")
