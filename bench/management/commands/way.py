"""`python manage.py way`: the project's files one streamed background run passes through (bench/way.py)."""

from django.core.management.base import BaseCommand

from bench.way import way


class Command(BaseCommand):
    help = "List the project's files one streamed background run passes through, submit to hand-off, in-process."

    def add_arguments(self, parser):
        parser.add_argument("--agent", default="stub-agent")

    def handle(self, *args, agent: str, **options):
        files = way(agent)
        for name in files:
            self.stdout.write(name)
        apps = {name.split("/", 1)[0] for name in files}
        self.stdout.write(f"{len(files)} files in {len(apps)} packages")
