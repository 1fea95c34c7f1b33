"""`python manage.py bench`: benchmarks against a running server; see docs/benchmarks.md."""

from django.core.management.base import BaseCommand
from django.db import connection

from bench import backlog as blocked_backlog
from bench import cpu, growth, operations
from bench.agno import agno_figures
from bench.baseline import FloorServer
from bench.demo import run_scenario
from bench.fair import figures as mix_figures
from bench.fair import mix
from bench.harness import AGENT, CPU_KINDS, Client, Drain, Figure, accept_burst, cpu_figures, drain, handoff, percentile
from bench.hitl import continue_latencies
from bench.inflight import figures as inflight_figures
from bench.inflight import inflight
from bench.journal import journaled, offered
from bench.options import SCENARIOS, add_options
from bench.replica import ReplicaServer, missing_environment
from bench.streamed import figures as streamed_figures
from bench.streams import cancel_times, delivery_delays
from bench.tooled import AGENT_ID, ModelProcess
from queueing.models import Ticket

TOOLED_KINDS = (*CPU_KINDS, "model")


class Command(BaseCommand):
    help = "Benchmark a running agentos from the outside; prints medians with min/max over repeats."

    def add_arguments(self, parser):
        add_options(parser)

    def handle(self, *args, url, repeats, scenario, clients, runs, sessions, backlog, unordered_url, **options):
        self.client = Client(url)
        self.replica = Client(options["replica_url"] or url)
        self.events = options["events"]
        self.tickets = options["tickets"]
        self.growth_runs = options["growth_runs"]
        self.growth_agent = options["growth_agent"]
        self.floor = not options["no_floor"]
        self.model_port = options["model_port"]
        self.mix = {key: options[key] for key in ("big", "small_users", "per_small")} | {"sleep": options["mix_sleep"]}
        self.options = {"clients": clients, "runs": runs, "sessions": sessions}
        self.inflight = {"runs": options["inflight_runs"], "sleep": options["inflight_sleep"]}
        self.streamed_rate = options["streamed_rate"]
        for name in scenario or SCENARIOS:
            if name == "order" and not unordered_url:
                self.stdout.write("order: skipped (needs --unordered-url)")
                continue
            if name in ("journal", "agno") and not offered(self.client, agno=name == "agno"):
                self.stdout.write(f"{name}: skipped (needs AGENTOS_COMPONENTS=bench.tooled:components, and Agno)")
                continue
            for figure in getattr(self, f"bench_{name}")(repeats, backlog=backlog, unordered_url=unordered_url):
                self.stdout.write(figure.line())

    def _drain(self, client: Client, *, stream: bool = False) -> float:
        return self._drain_measured(client, stream=stream).rate

    def _drain_measured(
        self,
        client: Client,
        *,
        stream: bool = False,
        replicas: tuple = (),
        agent: str = AGENT,
        serve: frozenset[int] | None = None,
        rate: float | None = None,
        clients: int | None = None,
    ) -> Drain:
        operations.vacuum_hot_tables()
        options = self.options
        return drain(
            client,
            runs=options["runs"],
            sessions=options["sessions"],
            clients=clients or options["clients"],
            stream=stream,
            replicas=replicas,
            agent=agent,
            serve=serve,
            rate=rate,
        )

    def bench_footprint(self, repeats, **_):
        """Resident memory of serve's processes, idle (PostgreSQL and Redis not counted)."""
        rss = cpu.serve_rss_mb()
        return [Figure(f"serve RSS, {kind}", "MB", [rss[kind]]) for kind in (*cpu.SERVE_KINDS, "all")]

    def bench_accept(self, repeats, **_):
        """The 202's latency with 1 client and with --clients, accepts/s and CPU per accept, against the floor
        (bench/floor.py) measured the same way in the same repeat."""
        clients = self.options["clients"]
        single, bursts, floors = [], [], []
        floor = FloorServer(_database_url()) if self.floor else None
        for _ in range(repeats):
            operations.vacuum_hot_tables()
            single.append(accept_burst(self.client, clients=1, total=100).p50)
            operations.vacuum_hot_tables()
            bursts.append(accept_burst(self.client, clients=clients, total=800))
            if floor is not None:
                with floor:
                    floors.append(accept_burst(Client(floor.url), clients=clients, total=800, wait=False))
        figures = [
            Figure("accept latency p50 (1 client)", "ms", single),
            Figure(f"accept latency p50 ({clients} clients)", "ms", [b.p50 for b in bursts]),
            Figure(f"accept latency p99 ({clients} clients)", "ms", [b.p99 for b in bursts]),
            Figure(f"accepts/s ({clients} clients)", "/s", [b.rate for b in bursts]),
            *cpu_figures("per accept", bursts),
        ]
        if floors:
            figures += [
                Figure(f"floor accept latency p99 ({clients} clients)", "ms", [f.p99 for f in floors]),
                Figure(f"floor accepts/s ({clients} clients)", "/s", [f.rate for f in floors]),
                Figure("floor CPU per accept, floor", "ms", [f.cpu["floor"] for f in floors]),
                Figure("floor CPU per accept, postgres", "ms", [f.cpu["postgres"] for f in floors]),
                Figure("accepts/s / floor", "ratio", [b.rate / f.rate for b, f in zip(bursts, floors, strict=True)]),
                Figure("accept p99 / floor p99", "ratio", [b.p99 / f.p99 for b, f in zip(bursts, floors, strict=True)]),
            ]
        return figures

    def bench_drain(self, repeats, **_):
        drains = [self._drain_measured(self.client) for _ in range(repeats)]
        name = f"drain {self.options['runs']} runs / {self.options['sessions']} sessions"
        return [
            Figure(name, "runs/s", [d.rate for d in drains]),
            Figure("drain's accepts/s (its submits only)", "/s", [d.accepts for d in drains]),
            Figure("drain's accept latency p50", "ms", [d.accept_p50 for d in drains]),
            Figure("drain's accept latency p99", "ms", [d.accept_p99 for d in drains]),
            *cpu_figures("per run", drains),
        ]

    def bench_streamed(self, repeats, **_):
        """The drain with every run `stream=true` against the plain one, unpaced and paced (bench/streamed.py)."""
        name = f"{self.options['runs']} runs / {self.options['sessions']} sessions"
        rate = self.streamed_rate
        pace = {"rate": rate, "clients": 4 * self.options["clients"]}  # threads enough for the streams in flight
        unpaced, paced = [], []
        for _ in range(repeats):
            unpaced.append(tuple(self._drain_measured(self.client, stream=s) for s in (False, True)))
            if rate:
                paced.append(tuple(self._drain_measured(self.client, stream=s, **pace) for s in (False, True)))
        return [*streamed_figures(name, unpaced), *(streamed_figures(f"{name}, {rate:g}/s", paced) if rate else [])]

    def bench_replicas(self, repeats, **_):
        """The drain over this server alone, over it and a second serve of the same deployment that the benchmark
        starts and stops (bench/replica.py: two web processes and two workers in all), and over this one alone
        again; two serves against the mean of the drains around them, so both meet the database in the same state
        (each drain adds its runs to the tables)."""
        missing = missing_environment()
        if missing:
            self.stdout.write(f"replicas: skipped (needs the server's {' and '.join(missing)} in the environment)")
            return []
        one, two, ratios = [], [], []
        for _ in range(repeats):
            before = self._drain_measured(self.client)
            with ReplicaServer() as replica:
                second = Client(replica.url)
                drain(self.client, runs=200, sessions=20, replicas=(second,))  # warms the replica, not measured
                two.append(self._drain_measured(self.client, replicas=(second,)))
            after = self._drain_measured(self.client)
            one += [before, after]
            ratios.append(two[-1].rate / ((before.rate + after.rate) / 2))
        name = f"{self.options['runs']} runs / {self.options['sessions']} sessions"
        return [
            Figure(f"drain over 1 serve, {name}", "runs/s", [d.rate for d in one]),
            Figure(f"drain over 2 serves, {name}", "runs/s", [d.rate for d in two]),
            *cpu_figures("per run over 2 serves", two),
            Figure("2 serves / 1 (the drains around)", "ratio", ratios),
        ]

    def bench_growth(self, repeats, **_):
        """One session of --growth-runs runs with 2 KB messages on `windowed-agent` (a history window of 20 runs): the
        median run time (started_at to completed_at) and hand-off gap of runs 1-50 and of the last 50."""
        figures: dict[str, list[float]] = {}
        for _ in range(repeats):
            operations.vacuum_hot_tables()
            grown = growth.session_growth(self.client, runs=self.growth_runs, agent=self.growth_agent)
            for name, value in grown.items():
                figures.setdefault(name, []).append(value)
        return [Figure(name, "ratio" if "/" in name else "ms", values) for name, values in figures.items()]

    def bench_handoff(self, repeats, **_):
        """The hand-off gap as the stored times show it, and as the worker measures it (its histogram
        `agentos_handoff_latency_seconds`: the next run's session released to its leg's start), mean over the
        scenario."""
        p50, p99, measured = [], [], []
        for _ in range(repeats):
            before = self.client.histogram("handoff_latency_seconds")
            gaps = handoff(self.client)
            after = self.client.histogram("handoff_latency_seconds")
            p50.append(percentile(gaps, 0.50))
            p99.append(percentile(gaps, 0.99))
            if before and after and after[1] > before[1]:
                measured.append(1000 * (after[0] - before[0]) / (after[1] - before[1]))
        figures = [Figure("handoff latency p50", "ms", p50), Figure("handoff latency p99", "ms", p99)]
        if measured:
            figures.append(Figure("handoff latency in the worker, mean", "ms", measured))
        return figures

    def bench_backlog(self, repeats, *, backlog, **_):
        clear_rates, blocked_rates, tag = [], [], None
        try:
            for _ in range(repeats):
                clear_rates.append(self._drain(self.client))
            tag = blocked_backlog.seed(self.client, tickets=backlog)
            self.stdout.write(f"backlog: {blocked_backlog.blocked(tag):,} tickets blocked behind paused heads")
            for _ in range(repeats):
                blocked_rates.append(self._drain(self.client))
        finally:
            if tag:
                blocked_backlog.clear(tag)
        ratio = [b / c for b, c in zip(blocked_rates, clear_rates, strict=True)]
        return [
            Figure("drain, no backlog", "runs/s", clear_rates),
            Figure(f"drain, {backlog:,} tickets blocked", "runs/s", blocked_rates),
            Figure("backlog / no backlog", "ratio", ratio),
        ]

    def bench_order(self, repeats, *, unordered_url, **_):
        unordered = Client(unordered_url)
        on, off = [], []
        for _ in range(repeats):
            on.append(self._drain(self.client))
            off.append(self._drain(unordered))
        return [
            Figure("drain, per-session order on", "runs/s", on),
            Figure("drain, per-session order off", "runs/s", off),
            Figure("order on / off", "ratio", [a / b for a, b in zip(on, off, strict=True)]),
        ]

    def bench_seed(self, repeats, **_):
        """The seed scenario (A, B, C on one session, D on another, 1 s each): how soon B follows A, how close
        together A and D start."""
        gaps, skews = [], []
        for _ in range(repeats):
            lanes = {lane.name: lane for lane in run_scenario(self.client, sleep=1.0)}
            gaps.append((lanes["B"].started() - lanes["A"].ended()) * 1000)
            skews.append(abs(lanes["D"].started() - lanes["A"].started()) * 1000)
        return [Figure("seed: A end to B start", "ms", gaps), Figure("seed: A and D start apart", "ms", skews)]

    def bench_stream(self, repeats, **_):
        """Publish-to-SSE delay on the other replica, and cancel (on the other replica) to CANCELLED."""
        p50, p99, cancel50, cancel99 = [], [], [], []
        for _ in range(repeats):
            delays = delivery_delays(self.client, self.replica, events=self.events)
            p50.append(percentile(delays, 0.50))
            p99.append(percentile(delays, 0.99))
            times = cancel_times(self.client, self.replica)
            cancel50.append(percentile(times, 0.50))
            cancel99.append(percentile(times, 0.99))
        return [
            Figure(f"stream delay p50 ({self.events} events)", "ms", p50),
            Figure(f"stream delay p99 ({self.events} events)", "ms", p99),
            Figure("cancel to CANCELLED p50 (20 runs)", "ms", cancel50),
            Figure("cancel to CANCELLED p99 (20 runs)", "ms", cancel99),
        ]

    def bench_hitl(self, repeats, **_):
        """A continue's 202 to its leg's start, and the leg's end to the held follow-up's start (20 runs)."""
        legs, follow_ups = [], []
        for _ in range(repeats):
            to_leg, to_follow_up = continue_latencies(self.client)
            legs.append(percentile(to_leg, 0.50))
            follow_ups.append(percentile(to_follow_up, 0.50))
        return [
            Figure("continue sent to leg start p50", "ms", legs),
            Figure("leg end to held follow-up start p50", "ms", follow_ups),
        ]

    def bench_ops(self, repeats, **_):
        """The operator's reads (`/metrics`, `/queue/stats`, the dead-letter list) with `--tickets` tickets."""
        operations.vacuum()
        before = Ticket.objects.count()
        empty = operations.read_costs(self.client)
        tag = operations.seed(tickets=self.tickets)
        try:
            self.stdout.write(f"ops: {Ticket.objects.count():,} tickets in the table")
            full = [operations.read_costs(self.client) for _ in range(repeats)]
        finally:
            operations.clear(tag)
        figures = [Figure(f"{name} p50, {before:,} tickets", "ms", [cost]) for name, cost in empty.items()]
        for name in empty:
            figures.append(Figure(f"{name} p50, {before + self.tickets:,} tickets", "ms", [c[name] for c in full]))
        return figures

    def bench_journal(self, repeats, **_):
        """`tooled-agent`'s drain (four model calls and three tool calls a run, on the fake model of bench/tooled.py
        in a process of its own), its CPU counted for this server's processes only; the lines say whether the
        server journaled the runs. Run it against a server with the journal on, then one with it off (never both
        up at once: each one's sweeper would publish the other's tickets to its own worker)."""
        drains: list[Drain] = []
        states = set()
        with ModelProcess(self.model_port):
            drain(self.client, runs=50, sessions=10, agent=AGENT_ID)  # its first runs open its connections
            for _ in range(repeats):
                measured = self._drain_measured(self.client, agent=AGENT_ID, serve=cpu.serve_pids(self.client.url))
                states.add("on" if journaled(self.client, measured) else "off")
                drains.append(measured)
        name = f"tooled drain {self.options['runs']} runs / {self.options['sessions']} sessions, journal"
        state = "/".join(sorted(states))
        return [
            Figure(f"{name} {state}", "runs/s", [d.rate for d in drains]),
            *cpu_figures(f"per tooled run, journal {state}", drains, TOOLED_KINDS),
        ]

    def bench_agno(self, repeats, **_):
        """bench/agno.py: `tooled-agent` against its twin of Agno's own classes, drained in turn, CPU per run."""
        return agno_figures(self, repeats)

    def bench_fair(self, repeats, **_):
        """The big-user/small-users mix (bench/fair.py): the small users' wait from their 202 to their run's start,
        the big user's runs/s; then the drain with its sessions spread over `--sessions`/4 users, and its CPU per
        run. Whether the server round robins and caps is its own settings': run it against each."""
        mixes, drains = [], []
        users = max(1, self.options["sessions"] // 4)
        for _ in range(repeats):
            operations.vacuum_hot_tables()
            mixes.append(mix(self.client, clients=self.options["clients"], **self.mix))
            operations.vacuum_hot_tables()
            drains.append(drain(self.client, users=users, **self.options, serve=cpu.serve_pids(self.client.url)))
        big, small = self.mix["big"], f"{self.mix['small_users']}x{self.mix['per_small']}"
        name = f"fair mix {big} + {small}, sleep={self.mix['sleep']:g}"
        drained = f"drain {self.options['runs']} runs / {self.options['sessions']} sessions / {users} users"
        return [
            *mix_figures(name, mixes),
            Figure(drained, "runs/s", [d.rate for d in drains]),
            *cpu_figures(f"per run, {drained}", drains),
        ]

    def bench_inflight(self, repeats, **_):
        """N runs of an S-second model call on N sessions against the same N runs with `sleep=0` (bench/inflight.py):
        the efficiency, and the worker's highest memory, threads and database connections meanwhile."""
        port = int(connection.settings_dict["PORT"] or 5432)
        measured = []
        for _ in range(repeats):
            operations.vacuum_hot_tables()
            measured.append(inflight(self.client, clients=self.options["clients"], database_port=port, **self.inflight))
        name = f"inflight {self.inflight['runs']} runs, sleep={self.inflight['sleep']:g}"
        return [*inflight_figures(name, measured), *cpu_figures(f"per run, {name}", measured)]


def _database_url() -> str:
    database = connection.settings_dict
    password = f":{database['PASSWORD']}" if database.get("PASSWORD") else ""
    return f"postgresql://{database['USER']}{password}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
