from django.core.management.base import BaseCommand

from bench.harness import Client, Figure, accept_latency, drain


class Command(BaseCommand):
    help = "Benchmark a running agentos (make serve) from the outside; prints medians with min/max over repeats."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:7777")
        parser.add_argument("--repeats", type=int, default=3)
        parser.add_argument("--clients", type=int, default=16)
        parser.add_argument("--accept-runs", type=int, default=800)
        parser.add_argument("--runs", type=int, default=200)
        parser.add_argument("--sessions", type=int, default=20)

    def handle(self, *args, url, repeats, clients, accept_runs, runs, sessions, **options):
        client = Client(url)
        single, p50, p99, rate = [], [], [], []
        for _ in range(repeats):
            single.append(accept_latency(client, clients=1, total=100)[0])
            low, high = accept_latency(client, clients=clients, total=accept_runs)
            p50.append(low)
            p99.append(high)
            rate.append(drain(client, runs=runs, sessions=sessions, clients=clients))
        for figure in (
            Figure("accept latency p50 (1 client)", "ms", single),
            Figure(f"accept latency p50 ({clients} clients)", "ms", p50),
            Figure(f"accept latency p99 ({clients} clients)", "ms", p99),
            Figure(f"drain {runs} runs / {sessions} sessions", "runs/s", rate),
        ):
            self.stdout.write(figure.line())
